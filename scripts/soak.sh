#!/usr/bin/env bash
# Soak (not run in CI): 64 processes of
# allocation churn and launch pacing on the simulated device
# (tests/fakecuda), a random one SIGKILLed every 100-500 ms and respawned,
# with the node board and the host-PID broker in use and, as root, a
# throwaway attacker user writing garbage into the board directory and its
# own board file, truncating what it can and holding idle connections to
# the broker. At the end, with the killer stopped:
#   - no tenant process ended other than by our SIGKILL or a clean exit 0
#     after the stop file (every exit status is checked);
#   - with every survivor paused: each ledger's used == the sum of its
#     slots == the simulated device's usage of that tenant's processes;
#   - with every process gone: each ledger's used == 0, the device's 0;
#   - the broker's and a never-killed observer tenant's descriptors and
#     resident memory did not grow.
# Hostile tenants (as root; docs/security.md): beside the honest tenants,
# for the whole run, the throwaway user also
#   - exports, releases and keeps the fd of 512 MiB again and again in a
#     1 GiB slice (a slice file in a mount namespace of its own;
#     `mem_hostile_share soak-fd`) while rewriting its own live ledger's
#     limit to 16 GiB every 100 ms, and plants share markers
#     naming pid 1 (canonical, zero-padded, and at root's name);
#   - registers 1024 fake live ledgers, makes 2001 registry files named for
#     other uids and squats root's plain registry name
#     (`node_hostile_quota fill`);
#   - floods root's exporter with 200 connections reopened as they close;
#   - pre-creates a payer file at root's name and holds a lease on it;
#   - holds flock on the MPS lock of root's control daemon;
# and root "pods" (mount namespaces of their own) squat and keep locking
# root's board files (`limiter_board_pod attack`), squat root's plain
# registry name and fill a registry file named for a pod not their own
# (`node_hostile_pod squat-pod`), and run two tenants whose ledger names are
# terminal escapes (x ESC[2J ESC[H ESC[8m) and bytes that are not UTF-8. Every 20 s, and any miss is a violation:
# root's `cushare top --once` and the exporter list every honest tenant
# (top's output holds no escape byte, the exporter's is UTF-8, a scrape is
# answered within 5 s), every honest ledger still says its own budget and
# compute limit, the simulated device holds no more than the budgets
# allow, and `cushare mps stop` returns within 15 s naming the holder. The
# fd loop exits 3 (a violation) if more than two rounds were ever held.
# A compact report goes to stdout and to --out; exit 1 on any violation,
# 2 when it cannot run.
#
#   scripts/soak.sh [--minutes N] [--out FILE] [--build DIR] [--keep]
#     --minutes  how long the kills go on (default 10; 1 is a quick check;
#                decimals allowed)
#     --out      report file (default soak-report.txt in the current directory)
#     --build    build directory with cushare, libcushare.so, limiter_worker,
#                soak_probe and fakecuda/ (default: build next to scripts/)
#     --keep     keep the work directory (logs, ledgers, fake state)
#
# Tenants (4 ledgers x 16 processes, each with a --mem budget near its
# working set; process 0 of tenant A is the observer):
#   A --sm 30 --policy force     NVML reports pid+100000: identity from the broker
#   B --sm 40 --policy default   NVML reports pid+100000: identity from the broker
#   C --sm 20 --policy force     NVML reports the pid (identity tier 0)
#   D no compute limit           memory only
# Without the NVML pid, a process's context is not charged (docs/
# accounting.md, "Fail closed where it cannot measure"): for A and B the
# device's figure is compared without the contexts.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
minutes=10
out=soak-report.txt
build=$here/../build
keep=0
while (($#)); do
  case $1 in
    --minutes) minutes=${2:?--minutes needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! secs=$(awk -v m="$minutes" 'BEGIN { if (m !~ /^[0-9]+(\.[0-9]+)?$/ || m <= 0) exit 1; s = int(m * 60 + 0.5); print (s < 20 ? 20 : s) }'); then
  echo "soak: --minutes must be a positive number" >&2
  exit 2
fi
build=$(cd "$build" 2>/dev/null && pwd) || { echo "soak: no build directory (make first)" >&2; exit 2; }
cushare=$build/cushare worker=$build/limiter_worker probe=$build/soak_probe
for f in "$cushare" "$worker" "$probe" "$build/libcushare.so" "$build/fakecuda/libcuda.so.1"; do
  [[ -x $f || -f $f ]] || { echo "soak: $f is missing: build first (make; cmake --build $build --target limiter_worker soak_probe)" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "soak: needs jq (apt-get install -y jq)" >&2; exit 2; }

# ---- configuration --------------------------------------------------------
readonly PROCS=64 PER_TENANT=16
tenant_names=(A B C D)
tenant_run=("--mem 512MiB --sm 30 --policy force" "--mem 512MiB --sm 40 --policy default"
  "--mem 512MiB --sm 20 --policy force" "--mem 512MiB")
tenant_offset=(100000 100000 0 0)   # FAKECUDA_NVML_PID_OFFSET
tenant_blocks=(200 200 50 50)       # kernel length: blocks x 1 us on the fake
churn_args=(--mode churn --max-kib 16384 --hold 4 --launches 4 --sync 4 --gap-us 20000)
broker_sock=/tmp/vgpulock/hostpid/broker.sock   # the compiled path: clients trust no other

# ---- work directory ---------------------------------------------------------
work=$(mktemp -d /tmp/cushare-soak.XXXXXX) || exit 2
chmod 0755 "$work"                   # the attacker reaches the board through it
mkdir -m 0700 "$work/private" "$work/ctl" "$work/logs"
mkdir -m 0700 "$work/ctl/ack" "$work/st"
mkdir -m 1777 "$work/board"           # root's, sticky: what the board requires of a shared directory
mkdir -m 0755 "$work/attacker"
stop=$work/ctl/stop pause=$work/ctl/pause ack=$work/ctl/ack
report=$work/report.txt
: >"$report"

export LD_LIBRARY_PATH=$build/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKECUDA_STATE=$work/dev/fake.state   # the simulated GPU: every user's, as /dev/nvidia*
export FAKECUDA_MEM=16g FAKECUDA_CTX_BYTES=8m FAKECUDA_CTX_EXTRA_BYTES=8m
export CUSHARE_BOARD=$work/board/cushare-board
mkdir -m 1777 "$work/reg" "$work/share" "$work/mps"
mkdir -m 0755 "$work/dev"
chmod 1777 "$work/reg" "$work/share" "$work/board"
export CUSHARE_REGISTRY=$work/reg/cushare-ledgers CUSHARE_SHARE_DIR=$work/share
export CUSHARE_MPS_CONTROL=$build/fakecuda/fake-nvidia-cuda-mps-control
export LIBVGPU_HOSTPID_BROKER=1
unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_SM_LIMIT CUDA_DEVICE_MEMORY_SHARED_CACHE LD_PRELOAD

say() { printf '%s\n' "$*" | tee -a "$report"; }
log() { printf '[soak %s] %s\n' "$(date +%T)" "$*" >&2; }
violations=0
violation() { violations=$((violations + 1)); say "VIOLATION: $*"; }

ledger_of() { echo "$work/private/ledger-${tenant_names[$1]}"; }

# ---- cleanup ----------------------------------------------------------------
broker_pid='' attacker_user='' attacker_pids=() holder_pids=() hostile_pids=() exporter_pid=
declare -A alive=()                   # wrapper pid -> slot
cleanup() {
  local p
  for p in "${!alive[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${attacker_pids[@]}" "${holder_pids[@]}" "${hostile_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [[ -n $exporter_pid ]] && kill -KILL "$exporter_pid" 2>/dev/null
  [[ -n ${mps_started:-} ]] && "$cushare" mps stop --dir "$work/mps" --force >/dev/null 2>&1
  # PR_SET_PDEATHSIG ends the workers of killed wrappers; any left over is ours by its --stop path.
  for p in $(pgrep -f -- "--stop $stop" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  for p in $(pgrep -f -- "--ledger $work/private/" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  [[ -n $broker_pid ]] && kill -TERM "$broker_pid" 2>/dev/null
  wait 2>/dev/null
  if [[ -n $attacker_user ]]; then
    local i
    for i in 1 2 3 4 5; do userdel "$attacker_user" 2>/dev/null && break; sleep 0.3; done
    id "$attacker_user" >/dev/null 2>&1 && echo "soak: could not remove user $attacker_user" >&2
  fi
  if ((keep)); then echo "soak: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'echo "soak: interrupted" >&2; exit 2' INT TERM

# ---- helpers ----------------------------------------------------------------
fds_of() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# The fewest of five looks 50 ms apart: a descriptor open for a moment
# (a board read, an identity query) is not growth.
fds_min() {
  local i n m=
  for i in 1 2 3 4 5; do
    n=$(fds_of "$1"); [[ -z $m ]] || ((n < m)) && m=$n
    ((i < 5)) && sleep 0.05
  done
  echo "$m"
}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
rss_of() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
child_of() { awk '{ print $1 }' "/proc/$1/task/$1/children" 2>/dev/null; }
metric() { awk -v m="$1" '$1 == m { print $2 }' "$work/broker.prom" 2>/dev/null | head -1; }
now_s() { date +%s; }

wpid=()                               # slot -> `cushare run` wrapper pid ("" while none)
declare -A killed=()                  # wrapper pids we SIGKILLed (it or its worker)
declare -A orphan_check=()            # worker pid of a killed wrapper -> deadline
n_spawned=0 n_killed=0 n_killed_wrapper=0 n_exit_ok=0 n_exit_killed=0
n_exit_signal=0 n_exit_nonzero=0 n_exit_early=0 n_orphans=0 n_sigkill_not_ours=0
phase=run

# Slot s runs `cushare run ... -- limiter_worker --mode churn` under a
# subshell that writes the status it ended with to st/<subshell pid>: bash's
# own job table forgets jobs it has reported, so `wait -n` cannot be trusted
# with a thousand of them.
spawn() {
  local slot=$1 t=$(($1 / PER_TENANT)) log
  log=$work/logs/tenant-${tenant_names[$t]}
  # shellcheck disable=SC2086 # tenant_run holds options
  (
    FAKECUDA_NVML_PID_OFFSET=${tenant_offset[$t]} \
      "$cushare" run ${tenant_run[$t]} --ledger "$(ledger_of "$t")" -- \
      "$worker" "${churn_args[@]}" --blocks "${tenant_blocks[$t]}" \
      --stop "$stop" --pause "$pause" --ack "$ack" >>"$log.out" 2>>"$log.err"
    echo $? >"$work/st/.$BASHPID" && mv "$work/st/.$BASHPID" "$work/st/$BASHPID"
  ) 2>/dev/null &
  wpid[slot]=$!
  alive[$!]=$slot
  n_spawned=$((n_spawned + 1))
}

# One wrapper has ended with status $2: classify it.
record_exit() {
  local p=$1 st=$2 slot=${alive[$1]} cls
  unset "alive[$p]"
  wpid[slot]=
  if ((st == 137)) && [[ -n ${killed[$p]:-} ]]; then
    cls=killed; n_exit_killed=$((n_exit_killed + 1))
  elif ((st == 137)); then
    cls=sigkill-not-ours; n_sigkill_not_ours=$((n_sigkill_not_ours + 1))
  elif ((st > 128)); then
    cls="signal-$((st - 128))"; n_exit_signal=$((n_exit_signal + 1))
  elif ((st != 0)); then
    cls="exit-$st"; n_exit_nonzero=$((n_exit_nonzero + 1))
  elif [[ $phase == run ]]; then
    cls=early-exit-0; n_exit_early=$((n_exit_early + 1))
  else
    cls=ok; n_exit_ok=$((n_exit_ok + 1))
  fi
  unset "killed[$p]"
  printf '%s slot %d tenant %s wrapper %d status %d %s\n' "$(date +%T.%N)" "$slot" \
    "${tenant_names[$((slot / PER_TENANT))]}" "$p" "$st" "$cls" >>"$work/exits"
  if [[ $cls != killed && $cls != ok ]]; then
    log "slot $slot wrapper $p: $cls"
    ((slot == 0)) && log "the observer ended ($cls)"
  fi
}

kill_one() {
  local slot=$((1 + RANDOM % (PROCS - 1))) p c run
  p=${wpid[slot]}
  [[ -n $p ]] || return 0
  run=$(child_of "$p")
  [[ -n $run ]] || return 0
  c=$(child_of "$run")
  killed[$p]=1
  n_killed=$((n_killed + 1))
  if [[ -z $c ]] || ((RANDOM % 8 == 0)); then
    kill -KILL "$run" 2>/dev/null        # `cushare run` itself: its worker must follow
    n_killed_wrapper=$((n_killed_wrapper + 1))
    [[ -n $c ]] && orphan_check[$c]=$(($(now_s) + 3))
  else
    kill -KILL "$c" 2>/dev/null
  fi
}

check_orphans() {
  local c t
  t=$(now_s)
  for c in "${!orphan_check[@]}"; do
    ((t >= orphan_check[$c])) || continue
    unset "orphan_check[$c]"
    if { tr '\0' ' ' <"/proc/$c/cmdline"; } 2>/dev/null | grep -qF -- "--stop $stop"; then
      n_orphans=$((n_orphans + 1))
      log "worker $c outlived its killed cushare run"
      kill -KILL "$c" 2>/dev/null
    fi
  done
}

# Records every slot that has ended since the last look.
reap_ended() {
  local f p
  for f in "$work"/st/[0-9]*; do
    [[ -e $f ]] || continue
    p=${f##*/}
    [[ -n ${alive[$p]:-} ]] && record_exit "$p" "$(cat "$f")"
    rm -f "$f"
    wait "$p" 2>/dev/null
  done
}
# The worker of slot s (child of its `cushare run`, child of the subshell).
worker_of() { local r; r=$(child_of "${wpid[$1]:-0}"); [[ -n $r ]] && child_of "$r"; }

samples=$work/samples
sample() {   # label: broker fds/rss, observer fds/rss, broker open connections
  local obs=$1 label=$2
  printf '%s t=%ds broker_fds %s broker_rss_kib %s observer_fds %s observer_rss_kib %s broker_open %s\n' \
    "$label" $(($(now_s) - t_start)) "$(fds_min "$broker_pid")" "$(rss_of "$broker_pid")" \
    "$(fds_min "$obs")" "$(rss_of "$obs")" "$(metric cushare_broker_connections_open)" >>"$samples"
}

# ---- the broker -----------------------------------------------------------------
t_start=$(now_s)
say "== cushare soak: $PROCS processes (4 tenants x $PER_TENANT), ${secs}s of kills, build $build"
if ((EUID == 0)); then
  "$cushare" broker --metrics "$work/broker.prom" --ready-file "$work/broker.ready" \
    2>"$work/logs/broker.err" &
  broker_pid=$!
  for _ in $(seq 100); do [[ -e $work/broker.ready ]] && break; kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
  if [[ ! -e $work/broker.ready ]]; then
    echo "soak: the broker did not start on $broker_sock (another one running?):" >&2
    cat "$work/logs/broker.err" >&2
    broker_pid=''
    exit 2
  fi
  say "broker: pid $broker_pid on $broker_sock (tenants: LIBVGPU_HOSTPID_BROKER=1)"
else
  say "SKIPPED: broker and attacker need root (the broker's path is root's; useradd for the attacker)"
fi

# ---- hostile tenants and pods (docs/security.md) ------------------------------
hostile=$work/attacker/u hstop=$work/attacker/hstop
honest_mib=512 attacker_mib=1024
# Only in the background (`as_attacker CMD &`): it execs, so that $! is the
# attacker's process itself (a function run with & is a subshell, which a
# kill would end while leaving its child behind).
as_attacker() { exec setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups -- "$@"; }
start_hostile() {
  install -d -o "$a_uid" -g "$a_gid" -m 0755 "$hostile" "$hostile/fill"
  chmod 0666 "$FAKECUDA_STATE"   # made by the first tenant
  install -m 0666 /dev/null "$FAKECUDA_STATE.ctl"   # the fake's /dev/nvidiactl: exports are opens of it
  port=$((20000 + $$ % 20000))
  "$cushare" exporter --listen "127.0.0.1:$port" --registry "$CUSHARE_REGISTRY" --no-scan \
    >"$work/logs/exporter.out" 2>"$work/logs/exporter.err" &
  exporter_pid=$!
  if "$cushare" mps start --dir "$work/mps" >"$work/logs/mps.out" 2>&1; then mps_started=1; fi
  # The budget escape: export, release, keep the fd, in a slice of 1 GiB
  # (the slice file mounted at /etc/cushare/slice.env in a mount namespace
  # of its own, as a CDI spec does), while the tenant rewrites its live
  # ledger's limit to 16 GiB.
  mkdir -p "$work/slice/up" "$work/slice/work"
  printf 'CUDA_DEVICE_MEMORY_LIMIT=%sm\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n' "$attacker_mib" \
    "$hostile/fd.ledger" >"$work/slice/slice.env"
  unshare -m --propagation private sh -c '
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/up,workdir=$1/work" /etc &&
    mkdir -p /etc/cushare && cp "$1/slice.env" /etc/cushare/slice.env &&
    exec setpriv --reuid="$2" --regid="$3" --clear-groups -- env LD_PRELOAD="$4/libcushare.so" \
      "$4/mem_hostile_share" soak-fd "$5"' sh "$work/slice" "$a_uid" "$a_gid" "$build" "$hstop" \
    >"$work/logs/hostile-fd.out" 2>"$work/logs/hostile-fd.err" &
  fd_loop_pid=$!
  hostile_pids+=("$fd_loop_pid")
  cat >"$work/attacker/loop.sh" <<'EOF'
# The throwaway user's file attacks, until the stop file appears.
probe=$1 stop=$2 ledger=$3 share=$4 uid=$5
n=0
while [ ! -e "$stop" ]; do
  n=$((n + 1))
  [ -e "$ledger" ] && "$probe" ledger-limit "$ledger" 17179869184
  k=$(printf '%016x' $((RANDOM * 32768 + RANDOM)))
  for f in "cushare-fdid-$uid-$k-1-3" "cushare-fdid-$uid-$k-01-3" "cushare-fdid-0-$k-1-3"; do
    : >"$share/$f" 2>/dev/null
  done
  if [ $((n % 50)) -eq 0 ]; then rm -f "$share"/cushare-fdid-*; fi
  sleep 0.1
done
echo "file attacks rounds $n"
EOF
  as_attacker bash "$work/attacker/loop.sh" "$probe" "$hstop" "$hostile/fd.ledger" "$CUSHARE_SHARE_DIR" "$a_uid" \
    >"$work/logs/attacker-files.out" 2>"$work/logs/attacker-files.err" &
  attacker_pids+=($!)
  # Names made to break a terminal and a scraper, by a root pod (the
  # throwaway user's own quota is full of its fake registrations).
  local name
  mkdir -p "$work/attacker/pod"
  for name in "x"$'\e[2J\e[H\e[8m' "bad"$'\xff\xfe'"name"; do
    unshare -m --propagation private "$cushare" run --mem 64MiB --ledger "$work/attacker/pod/$name" -- "$worker" --mode churn \
      --max-kib 1024 --hold 4 --launches 4 --sync 4 --gap-us 50000 --blocks 10 --stop "$hstop" \
      --pause "$work/attacker/pod/no-pause" --ack "$work/attacker/pod" \
      >>"$work/logs/hostile-names.out" 2>>"$work/logs/hostile-names.err" &
    hostile_pids+=($!)
  done
  as_attacker "$build/node_hostile_quota" fill "$hostile/fill" "$CUSHARE_REGISTRY" "$hostile/fill.ready" \
    >"$work/logs/attacker-fill.out" 2>&1 &
  holder_pids+=($!)
  for _ in $(seq 600); do [[ -e $hostile/fill.ready ]] && break; sleep 0.1; done
  [[ -e $hostile/fill.ready ]] || violation "the registry flood did not start (see logs/attacker-fill.out)"
  as_attacker "$probe" conn-flood 127.0.0.2 "$port" 200 "$hstop" >"$work/logs/attacker-flood.out" 2>&1 &
  attacker_pids+=($!)
  as_attacker "$probe" lease "$CUSHARE_SHARE_DIR/cushare-share-0-00000000deadbeef" "$hstop" \
    >"$work/logs/attacker-lease.out" 2>&1 &
  attacker_pids+=($!)
  local lock
  lock=$(ls "$work"/mps/GPU-*/lock 2>/dev/null | head -1)
  if [[ -n $lock ]]; then
    as_attacker flock "$lock" sh -c 'while [ ! -e "$0" ]; do sleep 0.2; done' "$hstop" \
      >"$work/logs/attacker-mps.out" 2>&1 &
    attacker_pids+=($!)
  fi
  # Two root pods: mount namespaces of their own.
  local pod
  pod=$(printf '%016x' "$(stat -L -c %i /proc/self/ns/mnt)")
  unshare -m --propagation private "$build/limiter_board_pod" attack "$CUSHARE_BOARD" "$pod" \
    "$work/attacker/pod-board.ready" >"$work/logs/pod-board.out" 2>&1 &
  holder_pids+=($!)
  # The registry's: root's plain name and a file named for a pod that is
  # not its own, 1024 live records, every lock held (it could also write
  # over the honest pod's live file, root ignores modes: that costs the
  # honest pod its records until its next start, docs/security.md, and is
  # left out here, where every honest tenant must stay listed).
  unshare -m --propagation private "$build/node_hostile_pod" squat-pod "$CUSHARE_REGISTRY" 00000000deadbeef \
    "$work/attacker/pod-reg.ready" >"$work/logs/pod-reg.out" 2>&1 &
  holder_pids+=($!)
  for _ in $(seq 300); do
    [[ -e $hostile/fill.ready && -e $work/attacker/pod-board.ready && -e $work/attacker/pod-reg.ready ]] && break
    sleep 0.1
  done
  say "hostile: fd export/release/keep loop under ${attacker_mib} MiB with its ledger's limit rewritten to 16 GiB," \
    "markers naming pid 1, escape and non-UTF-8 ledger names, 1024 fake registrations + 2001 squats," \
    "200 connections against the exporter (port $port), a leased payer file at root's name," \
    "${lock:+flock on $lock, }two root pods locking and squatting root's board and registry files"
}

# Root's views and every honest tenant's limits, under attack. Any miss is a
# violation; counts go to the report.
n_views=0 n_mps_checks=0 scrape_ms_max=0
check_views() {
  local out t name body t0 ms j lim sm used
  local want_sm=(30 40 20 0)
  n_views=$((n_views + 1))
  out=$(timeout 60 "$cushare" top --once --interval 100 --registry "$CUSHARE_REGISTRY" --no-scan 2>&1)
  printf '%s\n' "$out" >"$work/logs/top-last.txt"
  [[ $out == *$'\e'* ]] && violation "root's top printed an escape byte (view $n_views)"
  [[ $out == *'x?[2J?[H?[8m'* ]] || violation "root's top does not list the escape-named tenant, made safe (view $n_views)"
  t0=$(date +%s%N)
  body=$(curl -s --max-time 5 -o - -w '%{stderr}connect %{time_connect} first_byte %{time_starttransfer} total %{time_total} bytes %{size_download}\n' \
    "http://127.0.0.1:$port/metrics" 2>>"$work/logs/scrapes.txt")
  ms=$((($(date +%s%N) - t0) / 1000000))
  ((ms > scrape_ms_max)) && scrape_ms_max=$ms
  [[ -n $body ]] || violation "the exporter did not answer a scrape within 5 s (view $n_views)"
  iconv -f UTF-8 -t UTF-8 <<<"$body" >/dev/null 2>&1 || violation "the exporter's answer is not UTF-8 (view $n_views)"
  for ((t = 0; t < 4; t++)); do
    name=ledger-${tenant_names[$t]}
    [[ $out == *"$name"* ]] || { violation "root's top does not list tenant $name (view $n_views)"; cp "$work/logs/top-last.txt" "$work/logs/top-miss-$n_views.txt"; }
    [[ -z $body || $body == *"$name"* ]] || violation "the exporter does not list tenant $name (view $n_views)"
    j=$("$cushare" status --json "$(ledger_of "$t")" 2>/dev/null)
    lim=$(jq '.devices[0].limit' <<<"$j") sm=$(jq '.devices[0].sm_limit // 0' <<<"$j")
    ((lim == honest_mib * 1048576)) || violation "tenant $name: budget $lim, not ${honest_mib} MiB (view $n_views)"
    ((sm == want_sm[t])) || violation "tenant $name: compute limit $sm, not ${want_sm[t]} (view $n_views)"
  done
  used=$("$probe" fake | awk '$1 == "device" { print $4 }')
  # 4 honest budgets, the attacker's tenants, and every process's context.
  local bound=$(((4 * honest_mib + attacker_mib + 2 * 64 + 80 * 16) * 1048576))
  ((used <= bound)) || violation "the device holds $used B, more than every budget allows ($bound B): a budget escaped (view $n_views)"
  if [[ -n ${mps_started:-} ]] && ((n_views % 6 == 1)); then
    n_mps_checks=$((n_mps_checks + 1))
    t0=$(date +%s%N)
    "$cushare" mps stop --dir "$work/mps" >"$work/logs/mps-stop.out" 2>&1
    local rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    if ((rc == 0)); then
      mps_started=
      violation "cushare mps stop succeeded although the attacker holds the MPS lock"
    elif ((ms > 15000)); then
      violation "cushare mps stop took $ms ms with the MPS lock held by another user"
    elif ! grep -q "uid $a_uid" "$work/logs/mps-stop.out"; then
      violation "cushare mps stop did not name the lock's holder: $(head -c 300 "$work/logs/mps-stop.out")"
    fi
  fi
}

# Stops the hostile tenants (before the comparison: their memory is not the
# honest tenants'); the fd loop's status says whether it ever escaped.
stop_hostile() {
  touch "$hstop"
  local p st
  for p in "${hostile_pids[@]}"; do
    wait "$p"; st=$?
    if [[ $p == "${fd_loop_pid:-}" ]]; then
      ((st == 0)) || violation "the fd export/release/keep loop ended with status $st: $(tail -c 300 "$work/logs/hostile-fd.out" "$work/logs/hostile-fd.err" | tr '\n' ' ')"
    fi
  done
  hostile_pids=()
  for p in "${holder_pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  holder_pids=()
  say "hostile: $n_views views checked (top, exporter, limits, device), slowest scrape ${scrape_ms_max} ms, $n_mps_checks bounded mps stops; $(tr '\n' ' ' <"$work/logs/hostile-fd.out" 2>/dev/null)"
  say "scrapes (seconds): $(awk '{ c += $2; f += $4; t += $6; if ($6 > m) m = $6; n++ } END { if (n) printf "%d, mean connect %.3f first byte %.3f total %.3f, slowest %.3f", n, c / n, f / n, t / n, m }' "$work/logs/scrapes.txt")"
}

# ---- the tenants --------------------------------------------------------------
for ((s = 0; s < PROCS; s++)); do spawn "$s"; done
log "spawned $PROCS processes"
for _ in $(seq 100); do obs=$(worker_of 0); [[ -n $obs ]] && break; sleep 0.1; done
[[ -n ${obs:-} ]] || { echo "soak: the observer did not start" >&2; exit 2; }

# ---- the attacker -------------------------------------------------------------
if ((EUID == 0)) && command -v useradd >/dev/null && command -v setpriv >/dev/null; then
  attacker_user=cs-soak-$$
  for i in 1 2 3 4 5 6; do
    useradd -r -M -N -s /usr/sbin/nologin "$attacker_user" 2>/dev/null && break
    ((i == 6)) && { attacker_user=; echo "soak: useradd failed" >&2; exit 2; }
    sleep 0.$((i * 2))
  done
  a_uid=$(id -u "$attacker_user") a_gid=$(id -g "$attacker_user")
  broker_fds_before_attack=$(fds_min "$broker_pid")
  cat >"$work/attacker/garble.sh" <<'EOF'
# The attacker: garbage into the board directory and its own board file,
# truncation of every file it can reach, until the stop file appears.
board=$1 stop=$2 uid=$3 ledgers=$4
own=$board/cushare-board.$uid
n=0
while [ ! -e "$stop" ]; do
  n=$((n + 1))
  case $((RANDOM % 6)) in
    0) head -c $((RANDOM % 40000)) /dev/urandom >"$own" ;;
    1) { head -c 64 "$board/cushare-board.0"; head -c $((RANDOM * 2)) /dev/urandom; } >"$own" 2>/dev/null ;;
    2) truncate -s $((RANDOM % 33000)) "$own" ;;
    3) f=$board/junk.$((RANDOM % 24)); head -c $((RANDOM % 9000)) /dev/urandom >"$f"; chmod 0666 "$f" ;;
    4) f=$board/cushare-board.$((60000 + RANDOM % 8)); rm -f "$f"
       case $((RANDOM % 3)) in
         0) ln -s "$board/cushare-board.0" "$f" ;;
         1) mkfifo "$f" ;;
         2) head -c 40960 /dev/urandom >"$f" ;;
       esac ;;
    5) chmod "$(printf '0%o' $((RANDOM % 512)))" "$own" 2>/dev/null; chmod 0644 "$own" 2>/dev/null ;;
  esac
  if [ $((n % 4)) -eq 0 ]; then   # every file it can reach, others' included (refused)
    for f in "$board"/* "$board/cushare-board.0" "$ledgers"/*; do
      [ -e "$f" ] && [ ! -p "$f" ] && truncate -s $((RANDOM % 2 * RANDOM)) "$f" 2>/dev/null
    done
  fi
  if [ $((n % 50)) -eq 0 ]; then
    : >"$board/cushare-board" 2>/dev/null
    ln -sf /dev/zero "$board/cushare-board.$((61000 + RANDOM % 4))" 2>/dev/null
  fi
  sleep 0.05
done
echo "garble rounds $n"
EOF
  setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups -- \
    bash "$work/attacker/garble.sh" "$work/board" "$work/attacker/stop" "$a_uid" "$work/private" \
    >"$work/logs/attacker-garble.out" 2>"$work/logs/attacker-garble.err" &
  attacker_pids+=($!)
  setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups -- \
    "$probe" broker-hold "$broker_sock" 300 "$work/attacker/stop" \
    >"$work/logs/attacker-broker.out" 2>"$work/logs/attacker-broker.err" &
  attacker_pids+=($!)
  say "attacker: user $attacker_user (uid $a_uid): garbage and truncation in $work/board every 50 ms, 300 idle broker connections held"
  start_hostile
elif ((EUID == 0)); then
  say "SKIPPED: the attacker needs useradd and setpriv"
fi

# ---- the run ------------------------------------------------------------------
warm=$((secs / 10 < 60 ? secs / 10 : 60))
t_end=$(($(now_s) + secs))
t_warm=$(($(now_s) + warm))
t_next_sample=$t_warm
t_next_view=$(($(now_s) + 5))
warm_sampled=0
log "killing for ${secs}s (observer pid $obs, warm-up ${warm}s)"
while (($(now_s) < t_end)); do
  sleep "0.$(printf '%03d' $((100 + RANDOM % 400)))"
  kill_one
  reap_ended
  for ((s = 0; s < PROCS; s++)); do [[ -n ${wpid[s]} ]] || spawn "$s"; done
  check_orphans
  if [[ -n $broker_pid ]] && ! kill -0 "$broker_pid" 2>/dev/null; then
    wait "$broker_pid"; violation "the broker died (status $?)"; broker_pid=''
  fi
  if (($(now_s) >= t_next_sample)); then
    if ((!warm_sampled)); then sample "$obs" start; warm_sampled=1; else sample "$(worker_of 0)" during; fi
    t_next_sample=$(($(now_s) + 30))
  fi
  if [[ -n $exporter_pid ]] && (($(now_s) >= t_next_view)); then
    check_views
    t_next_view=$(($(now_s) + 20))
  fi
done
if [[ -n $exporter_pid ]]; then
  check_views
  stop_hostile
fi
phase=quiesce
# The last kill's slot is filled too: all $PROCS run when they are compared.
sleep 1
reap_ended
for ((s = 0; s < PROCS; s++)); do [[ -n ${wpid[s]} ]] || spawn "$s"; done
log "kills stopped: $n_killed kills, $n_spawned spawns"

# Every process alive and paused (holding what it holds) before the comparison.
t_dead=$(($(now_s) + 5))
while (($(now_s) < t_dead)) && ((${#orphan_check[@]})); do sleep 0.5; check_orphans; done
for c in "${!orphan_check[@]}"; do orphan_check[$c]=0; done
check_orphans
touch "$pause"
t_dead=$(($(now_s) + 90))
while :; do
  reap_ended   # a process ending now (it should not) is recorded, not respawned
  acked=0
  for ((s = 0; s < PROCS; s++)); do
    [[ -n ${wpid[s]} ]] || continue
    c=$(worker_of "$s")
    [[ -n $c && -e $ack/$c ]] && acked=$((acked + 1))
  done
  ((acked == ${#alive[@]})) && break
  if (($(now_s) >= t_dead)); then violation "only $acked of ${#alive[@]} processes paused within 90 s"; break; fi
  sleep 0.2
done
[[ $obs == "$(worker_of 0)" ]] || violation "the observer (pid $obs) is not the one alive at the end"
sample "$obs" end
log "$acked processes paused"

# ---- check 1: ledger == slots == device, with everyone alive and paused ---------
fake=$("$probe" fake) || { violation "soak_probe fake failed"; fake=; }
declare -A fake_used=() fake_ctx=()
while read -r kw pid _ used _ ctx; do
  [[ $kw == proc ]] || continue
  fake_used[$pid]=$used fake_ctx[$pid]=$ctx
done <<<"$fake"
fake_dev_used=$(awk '$1 == "device" { print $4 }' <<<"$fake")
declare -A in_ledger=()
say "-- with every process alive and paused (ledger used / sum of slots / device for its processes, MiB)"
sum_expected=0 tiers_all=""
for ((t = 0; t < 4; t++)); do
  j=$("$cushare" status --json "$(ledger_of "$t")" 2>>"$work/logs/status.err")
  used=$(jq '.devices[0].used' <<<"$j")
  slots=$(jq '[.processes[].bytes.dev0 // {} | to_entries[].value] | add // 0' <<<"$j")
  nlive=$(jq '[.processes[] | select(.state == "live")] | length' <<<"$j")
  ndead=$(jq '[.processes[] | select(.state != "live")] | length' <<<"$j")
  expected=0 mism=0
  while read -r pid total; do
    [[ -n $pid ]] || continue
    in_ledger[$pid]=1
    dev=${fake_used[$pid]:-0}
    ((tenant_offset[t])) && dev=$((dev - ${fake_ctx[$pid]:-0}))
    expected=$((expected + dev))
    if ((total != dev)); then
      mism=$((mism + 1))
      ((mism <= 3)) && say "   tenant ${tenant_names[$t]} pid $pid: slot $total B, device $dev B"
    fi
  done < <(jq -r '.processes[] | "\(.pid) \([.bytes.dev0 // {} | to_entries[].value] | add // 0)"' <<<"$j")
  sum_expected=$((sum_expected + expected))
  tiers=$(jq -r '[.processes[].identity] | group_by(.) | map("\(.[0])=\(length)") | join(",")' <<<"$j")
  tiers_all+="${tenant_names[$t]}: $tiers; "
  say "tenant ${tenant_names[$t]}: used $(mib "$used") slots $(mib "$slots") device $(mib "$expected")" \
    "live $nlive dead $ndead reaped $(jq '.reaped' <<<"$j") peak $(mib "$(jq '.devices[0].peak' <<<"$j")")" \
    "limit $(mib "$(jq '.devices[0].limit' <<<"$j")")"
  peak=$(jq '.devices[0].peak' <<<"$j") limit=$(jq '.devices[0].limit' <<<"$j")
  ((peak <= limit)) || violation "tenant ${tenant_names[$t]}: peak $peak above the budget $limit"
  ((used == slots)) || violation "tenant ${tenant_names[$t]}: ledger used $used != sum of slots $slots"
  ((used == expected)) || violation "tenant ${tenant_names[$t]}: ledger used $used != device usage of its processes $expected"
  ((mism == 0)) || violation "tenant ${tenant_names[$t]}: $mism processes whose slot differs from the device"
  ((nlive == PER_TENANT)) || violation "tenant ${tenant_names[$t]}: $nlive live slots, $PER_TENANT processes"
  ((ndead == 0)) || violation "tenant ${tenant_names[$t]}: $ndead dead slots left after a reaping status"
done
strays=0
for pid in "${!fake_used[@]}"; do [[ -n ${in_ledger[$pid]:-} ]] || strays=$((strays + 1)); done
((strays == 0)) || violation "$strays processes hold device memory without a ledger slot"
say "identity tiers: $tiers_all"

# ---- stop: the attacker, then every survivor exits cleanly ----------------------
if ((${#attacker_pids[@]})); then
  touch "$work/attacker/stop"
  for p in "${attacker_pids[@]}"; do
    wait "$p"; st=$?; ((st == 0)) || say "note: attacker process $p ended with status $st"
  done
  attacker_pids=()
  sleep 0.5    # the broker's deadline (100 ms) closes what it still held
fi
phase=stop
rm -f "$pause"
touch "$stop"
t_dead=$(($(now_s) + 90))
while ((${#alive[@]})) && (($(now_s) < t_dead)); do
  sleep 0.2
  reap_ended
done
if ((${#alive[@]})); then
  violation "${#alive[@]} processes did not exit within 90 s of the stop file"
  for p in "${!alive[@]}"; do r=$(child_of "$p"); [[ -n $r ]] && kill -KILL "$r"; done
  sleep 1
  reap_ended
fi
left=$(pgrep -f -- "--stop $stop" | wc -l)
((left == 0)) || violation "$left worker processes left running after their cushare run ended"

# ---- check 2: everything gone -----------------------------------------------------
say "-- with every process gone"
for ((t = 0; t < 4; t++)); do
  j=$("$cushare" status --json "$(ledger_of "$t")" 2>>"$work/logs/status.err")
  used=$(jq '.devices[0].used' <<<"$j") live=$(jq '.live' <<<"$j") np=$(jq '.processes | length' <<<"$j")
  say "tenant ${tenant_names[$t]}: used $used live $live slots $np"
  ((used == 0 && live == 0 && np == 0)) || violation "tenant ${tenant_names[$t]}: used $used, live $live, $np slots with nothing running"
done
fake_end=$("$probe" fake | awk '$1 == "device" { print $4 }')
fake_procs=$("$probe" fake | grep -c '^proc')
say "device: used $fake_end B, $fake_procs processes listed (paused: ${fake_dev_used:-?} B in all, tenants' share $sum_expected B)"
((fake_end == 0 && fake_procs == 0)) || violation "the simulated device still shows $fake_end B used by $fake_procs processes"

# ---- check 3: exits ---------------------------------------------------------------
say "-- processes: $n_spawned spawned, $n_killed SIGKILLs sent ($n_killed_wrapper to cushare run itself)"
say "exits: $n_exit_killed by our SIGKILL, $n_exit_ok clean at the stop file, $n_exit_signal by another signal, $n_exit_nonzero nonzero, $n_exit_early early exit 0, $n_sigkill_not_ours SIGKILL not ours; $n_orphans workers outlived their cushare run"
((n_exit_signal == 0)) || violation "$n_exit_signal processes died of a signal we did not send"
((n_sigkill_not_ours == 0)) || violation "$n_sigkill_not_ours processes were SIGKILLed by someone else"
((n_exit_nonzero == 0)) || violation "$n_exit_nonzero processes exited nonzero"
((n_exit_early == 0)) || violation "$n_exit_early processes exited before the stop file"
((n_orphans == 0)) || violation "$n_orphans workers outlived their killed cushare run"
((n_exit_ok == PROCS)) || violation "$n_exit_ok of $PROCS survivors exited cleanly"
grep -v ' killed$\| ok$' "$work/exits" | head -5 | while read -r l; do say "   $l"; done
for f in "$work"/logs/tenant-*.err; do
  grep -h 'worker' "$f" | head -3 | while read -r l; do say "   $(basename "$f"): $l"; done
done
obs_line=$(grep -h "^churn pid $obs:" "$work"/logs/tenant-A.out)
say "observer: ${obs_line:-no summary line}"
for ((t = 0; t < 4; t++)); do   # the survivors' own counts (the killed ones wrote none)
  awk -v t="${tenant_names[$t]}" '/^churn pid/ { n++; for (i = 4; i < NF; i += 2) s[$i] += $(i + 1) } END {
    printf "survivors %s (%d): launches %d paced %d sleeps %d sleep_ms %d allocs %d refused %d ctx_refused %d\n",
      t, n, s["launches"], s["paced"], s["sleeps"], s["sleep_ms"], s["allocs"], s["refused"], s["ctx_refused"] }' \
    "$work/logs/tenant-${tenant_names[$t]}.out" | tee -a "$report"
done

# ---- check 4: descriptors and memory --------------------------------------------------
say "-- growth (start = after ${warm}s of warm-up, end = after the kills)"
read_sample() { awk -v l="$1" -v k="$2" '$1 == l { for (i = 2; i < NF; i++) if ($i == k) print $(i + 1) }' "$samples"; }
for who in observer broker; do
  [[ $who == broker && -z $broker_pid ]] && continue
  f0=$(read_sample start "${who}_fds") f1=$(read_sample end "${who}_fds")
  r0=$(read_sample start "${who}_rss_kib") r1=$(read_sample end "${who}_rss_kib")
  rmax=$(awk -v k="${who}_rss_kib" '{ for (i = 2; i < NF; i++) if ($i == k && $(i + 1) > m) m = $(i + 1) } END { print m + 0 }' "$samples")
  say "$who: fds $f0 -> $f1, rss $r0 -> $r1 KiB (max $rmax)"
  if [[ $who == observer ]]; then
    ((f1 <= f0)) || violation "observer descriptors grew $f0 -> $f1"
  fi
  ((r1 - r0 <= 1024 || r1 * 100 <= r0 * 105)) || violation "$who resident memory grew $r0 -> $r1 KiB"
done
series() { awk -v k="$1" '{ for (i = 2; i < NF; i++) if ($i == k) printf " %s", $(i + 1) } END { printf "\n" }' "$samples"; }
say "samples every 30 s: observer rss KiB:$(series observer_rss_kib)"
say "                    observer fds:$(series observer_fds)"
[[ -n $broker_pid ]] && say "                    broker rss KiB:$(series broker_rss_kib)"
if [[ -n $broker_pid ]]; then
  bf=$(fds_min "$broker_pid")
  say "broker: fds before the attack $broker_fds_before_attack, after it ended $bf; open connections peak $(metric cushare_broker_connections_open_peak)"
  ((bf <= broker_fds_before_attack)) || violation "broker descriptors grew $broker_fds_before_attack -> $bf"
  say "broker: $(metric cushare_broker_replies_ok_total) replies ok, $(metric cushare_broker_timeouts_total) timeouts, rejected by uid cap $(awk '/^cushare_broker_rejected_total\{reason="uid_cap"\}/ { print $2 }' "$work/broker.prom"), accepted $(metric cushare_broker_accepted_total)"
  kill -TERM "$broker_pid"; wait "$broker_pid"; st=$?; broker_pid=
  ((st == 0)) || violation "the broker exited with status $st at shutdown"
fi
for f in "$work"/logs/attacker-*.out; do [[ -s $f ]] && say "attacker: $(head -c 300 "$f" | tr '\n' ' ')"; done
if [[ -n $exporter_pid ]]; then
  kill -KILL "$exporter_pid" 2>/dev/null; wait "$exporter_pid" 2>/dev/null; exporter_pid=
fi
[[ -n ${mps_started:-} ]] && "$cushare" mps stop --dir "$work/mps" --force >/dev/null 2>&1 && mps_started=

# Distinct warnings of the library (numbers masked), for the record.
say "-- tenant stderr, distinct lines (numbers masked), most frequent first"
cat "$work"/logs/tenant-*.err | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -8 |
  while read -r l; do say "   $l"; done

say "== $(if ((violations)); then echo "FAIL: $violations violations"; else echo "PASS"; fi) after $(($(now_s) - t_start))s"
cp "$report" "$out"
((violations == 0))
