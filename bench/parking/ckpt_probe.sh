#!/usr/bin/env bash
# Coordinator probe: what the checkpoint API requires on the real driver.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; L=$OUT/ckpt.txt; exec > >(tee -a "$L") 2>&1
cd "$(dirname "$0")"
[ -n "${MOCK:-}" ] || nvcc -O2 -arch=sm_90 -o /tmp/ckpt ckpt_probe.cu -lcuda || exit 1
P=${MOCK:-/tmp/ckpt}
nvidia-smi --query-gpu=name,driver_version,persistence_mode,memory.used --format=csv
smi_pid(){ nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep -w "$1" || echo "pid $1 not in compute apps"; }
start_target(){ # name size mode [prefix...]
  local n=$1 s=$2 m=$3; shift 3
  rm -f /tmp/in.$n; mkfifo /tmp/in.$n
  ( "$@" $P target "$s" "$m" < /tmp/in.$n > /tmp/t.$n.log 2>&1 ) &
  eval "JOB_$n=$!"
  exec {fd}>/tmp/in.$n; eval "FD_$n=$fd"
  for _ in $(seq 200); do grep -q ready /tmp/t.$n.log 2>/dev/null && break; sleep 0.1; done
  TP=$(sed -n 's/.*ready pid=\([0-9]*\).*/\1/p' /tmp/t.$n.log); echo "== target $n ready (pid in its ns $TP)"; }
send(){ local v="FD_$1"; echo "$2" >&${!v}; }
ctl(){ timeout 60 $P ctl "$@"; echo "   (rc $?)"; }
fin(){ local j="JOB_$1" v="FD_$1"; echo quit >&${!v}; timeout 30 tail --pid=${!j} -f /dev/null || { echo "target $1 did not quit"; kill -9 ${!j}; }; }
show(){ echo "--- target $1 log:"; cat /tmp/t.$1.log; }

echo "##### S1 external root, no cuInit in caller"
start_target s1 1024 plain; pid=$TP; echo "host pid $pid"
ctl state $pid; ctl state $pid 0 init
ctl lock $pid 5000; ctl state $pid; smi_pid $pid
ctl checkpoint $pid; ctl state $pid; smi_pid $pid; nvidia-smi --query-gpu=memory.used --format=csv
ctl tid $pid
ctl restore $pid; ctl state $pid; ctl unlock $pid; ctl state $pid
send s1 check; sleep 1; fin s1; show s1

echo "##### S2 lock while target sits in a 4 s kernel sync; S3 call blocked while locked"
start_target s2 512 plain; pid=$TP
send s2 "spin 4000"; sleep 0.5
ctl lock $pid 1000; ctl state $pid
ctl lock $pid 10000; ctl state $pid
send s2 call; sleep 1.5; echo "after 1.5s locked:"; cat /tmp/t.s2.log
ctl checkpoint $pid; ctl restore $pid; ctl unlock $pid
sleep 0.5; send s2 check; sleep 1; fin s2; show s2

echo "##### S4 self checkpoint from a thread"
timeout 90 $P target 256 self; echo "(rc $?)"

echo "##### S5 other users"
id probeu >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin probeu
id probev >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin probev
ls -l /dev/nvidia* | head -5
start_target s5 256 plain; pid=$TP
echo "probeu -> root target:"; timeout 60 setpriv --reuid=probeu --regid=probeu --clear-groups $P ctl lock $pid 3000; echo "(rc $?)"
ctl state $pid; fin s5
start_target s5u 256 plain setpriv --reuid=probeu --regid=probeu --clear-groups; pid=$TP
echo "probev -> probeu target:"; timeout 60 setpriv --reuid=probev --regid=probev --clear-groups $P ctl lock $pid 3000; echo "(rc $?)"
echo "probeu -> probeu target:"; for o in lock checkpoint restore unlock; do timeout 60 setpriv --reuid=probeu --regid=probeu --clear-groups $P ctl $o $pid 3000; echo "(rc $?)"; done
echo "root -> probeu target:"; ctl lock $pid 3000; ctl checkpoint $pid; ctl restore $pid; ctl unlock $pid
send s5u check; sleep 1; fin s5u; show s5u

echo "##### S6 pid namespaces"
start_target s6 256 plain; pid=$TP
echo "caller in a new pid ns, host pid $pid:"; timeout 60 unshare -p -f --mount-proc $P ctl lock $pid 3000; echo "(rc $?)"
ctl state $pid; ctl unlock $pid
echo "caller in a new mount ns:"; timeout 60 unshare -m $P ctl lock $pid 3000; echo "(rc $?)"; ctl unlock $pid
fin s6
start_target s6n 256 plain unshare -p -f --mount-proc; pid=$(pgrep -n -f "target 256 plain"); ps -o pid,args -p $pid
echo "host caller -> target in a pid ns (host pid $pid):"; ctl lock $pid 3000; ctl checkpoint $pid; ctl restore $pid; ctl unlock $pid
send s6n check; sleep 1; fin s6n; show s6n

echo "##### S7 VMM exported fd"
start_target s7 1024 vmm; pid=$TP
ctl lock $pid 5000; ctl checkpoint $pid; ctl state $pid; ctl restore $pid; ctl unlock $pid; ctl state $pid
send s7 check; sleep 1; fin s7; show s7

echo "##### S8 8 GiB timing; S10 SIGKILL while checkpointed"
start_target s8 8192 plain; pid=$TP; smi_pid $pid
ctl lock $pid 5000; ctl checkpoint $pid; smi_pid $pid; grep -E 'MemAvailable' /proc/meminfo; ctl restore $pid; ctl unlock $pid
send s8 check; sleep 3
ctl lock $pid 5000; ctl checkpoint $pid; nvidia-smi --query-gpu=memory.used --format=csv; grep VmRSS /proc/$pid/status
kill -9 $pid; sleep 2; nvidia-smi --query-gpu=memory.used --format=csv; show s8
echo PROBE-DONE
