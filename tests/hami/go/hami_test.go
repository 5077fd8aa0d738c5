// Decodes cushare's HAMi region with HAMi's own layout. The types below
// transcribe Project-HAMi/HAMi pkg/monitor/nvidia/v1/spec.go (shared
// region layout v1) field by field, and the accessors do what that file's
// Spec methods do; the magic and the version test are those of
// pkg/monitor/nvidia/cudevshr.go (loadCache). Standard library only.
//
// Modes, chosen by the environment (tests/hami/run.sh sets them):
//   HAMI_GOLDEN=FILE   the golden region (hami_golden file FILE)
//   HAMI_LIVE=FILE     a region cushare tenants keep: HAMI_EXPECT lists
//                      "pid:bytes" of each live tenant, HAMI_LIMIT the
//                      budget in bytes, HAMI_SM the SM limit
//   HAMI_SET=FILE      HAMI_RECENT_KERNEL / HAMI_UTIL_SWITCH written the
//                      way the monitor's feedback loop writes them
package hami

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

const sharedRegionMagicFlag = 19920718

type headerT struct {
	initializedFlag int32
	majorVersion    int32
	minorVersion    int32
}

type deviceMemory struct {
	contextSize uint64
	moduleSize  uint64
	bufferSize  uint64
	offset      uint64
	total       uint64
	unused      [3]uint64
}

type deviceUtilization struct {
	decUtil uint64
	encUtil uint64
	smUtil  uint64
	unused  [3]uint64
}

type shrregProcSlotT struct {
	pid         int32
	hostpid     int32
	used        [16]deviceMemory
	monitorused [16]uint64
	deviceUtil  [16]deviceUtilization
	status      int32
	unused      [3]uint64
}

type uuid struct {
	uuid [96]byte
}

type semT struct {
	sem [32]byte
}

type sharedRegionT struct {
	initializedFlag int32
	majorVersion    int32
	minorVersion    int32
	smInitFlag      int32
	ownerPid        uint32
	sem             semT
	num             uint64
	uuids           [16]uuid

	limit   [16]uint64
	smLimit [16]uint64
	procs   [1024]shrregProcSlotT

	procnum           int32
	utilizationSwitch int32
	recentKernel      int32
	priority          int32
	lastKernelTime    int64
	unused            [4]uint64
}

type spec struct{ sr *sharedRegionT }

// As HAMi's v1 Spec: sums over procs[:procnum].
func (s spec) deviceMemoryTotal(idx int) uint64 {
	v := uint64(0)
	for _, p := range s.sr.procs[:int(s.sr.procnum)] {
		v += p.used[idx].total
	}
	return v
}

func (s spec) deviceMemoryContextSize(idx int) uint64 {
	v := uint64(0)
	for _, p := range s.sr.procs[:int(s.sr.procnum)] {
		v += p.used[idx].contextSize
	}
	return v
}

func (s spec) deviceSmUtil(idx int) uint64 {
	v := uint64(0)
	for _, p := range s.sr.procs[:int(s.sr.procnum)] {
		v += p.deviceUtil[idx].smUtil
	}
	return v
}

func (s spec) deviceUUID(idx int) string { return string(s.sr.uuids[idx].uuid[:]) }

// mapCache does what loadCache does: size, mmap shared read-write, magic,
// then the v1 test (majorVersion 1, at least the struct's size).
func mapCache(t *testing.T, path string) (spec, []byte) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	if info.Size() < int64(unsafe.Sizeof(headerT{})) {
		t.Fatalf("cache file size %d too small", info.Size())
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0666)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, int(info.Size()), syscall.PROT_WRITE|syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	head := (*headerT)(unsafe.Pointer(&data[0]))
	if head.initializedFlag != sharedRegionMagicFlag {
		t.Fatalf("cache file magic flag not matched: %d", head.initializedFlag)
	}
	if info.Size() == 1197897 || head.majorVersion != 1 {
		t.Fatalf("not v1: size %d version %d.%d", info.Size(), head.majorVersion, head.minorVersion)
	}
	if info.Size() < int64(unsafe.Sizeof(sharedRegionT{})) {
		t.Fatalf("cache file is %d bytes, shared region needs %d", info.Size(), unsafe.Sizeof(sharedRegionT{}))
	}
	return spec{sr: (*sharedRegionT)(unsafe.Pointer(&data[0]))}, data
}

func eq(t *testing.T, what string, got, want interface{}) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func TestLayoutSize(t *testing.T) {
	eq(t, "sizeof(sharedRegionT)", unsafe.Sizeof(sharedRegionT{}), uintptr(2008952))
	eq(t, "sizeof(shrregProcSlotT)", unsafe.Sizeof(shrregProcSlotT{}), uintptr(1960))
	eq(t, "offsetof(procs)", unsafe.Offsetof(sharedRegionT{}.procs), uintptr(1856))
}

func TestGolden(t *testing.T) {
	path := os.Getenv("HAMI_GOLDEN")
	if path == "" {
		t.Skip("HAMI_GOLDEN not set")
	}
	s, data := mapCache(t, path)
	defer syscall.Munmap(data)
	eq(t, "num", s.sr.num, uint64(2))
	eq(t, "minor", s.sr.minorVersion, int32(1))
	eq(t, "uuid0", strings.TrimRight(s.deviceUUID(0), "\x00"), "GPU-00112233-4455-6677-8899-aabbccddeeff")
	eq(t, "limit0", s.sr.limit[0], uint64(1<<30))
	eq(t, "limit1", s.sr.limit[1], uint64(2<<30))
	eq(t, "smLimit1", s.sr.smLimit[1], uint64(50))
	eq(t, "procnum", s.sr.procnum, int32(3))
	eq(t, "pid0", s.sr.procs[0].pid, int32(101))
	eq(t, "hostpid2", s.sr.procs[2].hostpid, int32(40103))
	eq(t, "status2", s.sr.procs[2].status, int32(1))
	eq(t, "total dev0", s.deviceMemoryTotal(0), uint64(500<<20))
	eq(t, "total dev1", s.deviceMemoryTotal(1), uint64(1000<<20))
	eq(t, "context dev1", s.deviceMemoryContextSize(1), uint64(300<<20))
	eq(t, "buffer proc2", s.sr.procs[2].used[1].bufferSize, uint64(700<<20))
	eq(t, "sm dev1", s.deviceSmUtil(1), uint64(45))
	eq(t, "utilizationSwitch", s.sr.utilizationSwitch, int32(1))
	eq(t, "recentKernel", s.sr.recentKernel, int32(2))
	eq(t, "priority", s.sr.priority, int32(1))
	eq(t, "lastKernelTime", s.sr.lastKernelTime, int64(1764460800))
}

func envU(t *testing.T, name string) uint64 {
	v, err := strconv.ParseUint(os.Getenv(name), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

func TestLive(t *testing.T) {
	path := os.Getenv("HAMI_LIVE")
	if path == "" {
		t.Skip("HAMI_LIVE not set")
	}
	// What loadCache sees in the container's directory: at most two
	// entries, one "*.cache"; cushare's ledger beside it by magic.
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	caches := 0
	ledgers := 0
	for _, e := range entries {
		if strings.Contains(e.Name(), ".cache") {
			caches++
		}
		b := make([]byte, 8)
		if f, err := os.Open(filepath.Join(filepath.Dir(path), e.Name())); err == nil {
			f.Read(b)
			f.Close()
			if string(b) == "CUSHLDG1" {
				ledgers++
			}
		}
	}
	if len(entries) > 2 || caches != 1 || ledgers != 1 {
		t.Errorf("directory holds %d entries, %d *.cache, %d cushare ledgers; want <= 2, 1, 1",
			len(entries), caches, ledgers)
	}
	s, data := mapCache(t, path)
	defer syscall.Munmap(data)
	eq(t, "limit0", s.sr.limit[0], envU(t, "HAMI_LIMIT"))
	eq(t, "smLimit0", s.sr.smLimit[0], envU(t, "HAMI_SM"))
	if s.sr.num < 1 || !strings.HasPrefix(s.deviceUUID(0), "GPU-") {
		t.Errorf("device 0: num %d uuid %q", s.sr.num, strings.TrimRight(s.deviceUUID(0), "\x00"))
	}
	var sum uint64
	for _, pe := range strings.Split(os.Getenv("HAMI_EXPECT"), ",") {
		kv := strings.Split(pe, ":")
		pid, _ := strconv.Atoi(kv[0])
		want, _ := strconv.ParseUint(kv[1], 10, 64)
		found := false
		for _, p := range s.sr.procs[:int(s.sr.procnum)] {
			if int(p.pid) != pid {
				continue
			}
			found = true
			eq(t, "status of "+kv[0], p.status, int32(1))
			eq(t, "buffer bytes of "+kv[0], p.used[0].bufferSize, want)
			if p.used[0].contextSize == 0 || p.used[0].total != p.used[0].contextSize+want {
				t.Errorf("pid %d: context %d total %d", pid, p.used[0].contextSize, p.used[0].total)
			}
			sum += p.used[0].total
		}
		if !found {
			t.Errorf("pid %d not among procs[:%d]", pid, s.sr.procnum)
		}
	}
	eq(t, "DeviceMemoryTotal(0)", s.deviceMemoryTotal(0), sum)
	t.Logf("decoded: procnum %d, device 0 total %d bytes, context %d, limit %d, sm %d%%, priority %d",
		s.sr.procnum, s.deviceMemoryTotal(0), s.deviceMemoryContextSize(0), s.sr.limit[0],
		s.sr.smLimit[0], s.sr.priority)
	if want := os.Getenv("HAMI_RECENT_KERNEL_WANT"); want != "" {
		eq(t, "recentKernel", strconv.Itoa(int(s.sr.recentKernel)), want)
	}
}

// TestSet writes feedback as the monitor's Observe does (Spec's
// SetRecentKernel / SetUtilizationSwitch: plain stores into the mapping).
func TestSet(t *testing.T) {
	path := os.Getenv("HAMI_SET")
	if path == "" {
		t.Skip("HAMI_SET not set")
	}
	s, data := mapCache(t, path)
	defer syscall.Munmap(data)
	if v := os.Getenv("HAMI_RECENT_KERNEL"); v != "" {
		n, _ := strconv.Atoi(v)
		s.sr.recentKernel = int32(n)
	}
	if v := os.Getenv("HAMI_UTIL_SWITCH"); v != "" {
		n, _ := strconv.Atoi(v)
		s.sr.utilizationSwitch = int32(n)
	}
}
