// Probe of the driver's checkpoint API rules (coordinator experiment).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>
#include <signal.h>

static double now_ms(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
__global__ void fill(unsigned *p, size_t n, unsigned seed){size_t i=blockIdx.x*(size_t)blockDim.x+threadIdx.x;for(;i<n;i+=(size_t)gridDim.x*blockDim.x)p[i]=(unsigned)i*2654435761u^seed;}
__global__ void check(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad){size_t i=blockIdx.x*(size_t)blockDim.x+threadIdx.x;for(;i<n;i+=(size_t)gridDim.x*blockDim.x)if(p[i]!=((unsigned)i*2654435761u^seed))atomicAdd(bad,1ull);}
__global__ void spin(unsigned long long ns){unsigned long long t0,t;asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t0));do{asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t));}while(t-t0<ns);}

static const char *st(CUprocessState s){switch(s){case CU_PROCESS_STATE_RUNNING:return "RUNNING";case CU_PROCESS_STATE_LOCKED:return "LOCKED";case CU_PROCESS_STATE_CHECKPOINTED:return "CHECKPOINTED";case CU_PROCESS_STATE_FAILED:return "FAILED";}return "?";}
static const char *en(CUresult r){const char *s=0;cuGetErrorName(r,&s);return s?s:"?";}

static int op(const char *o, int pid, unsigned timeout){
  double t0=now_ms(); CUresult r;
  if(!strcmp(o,"state")){CUprocessState s;r=cuCheckpointProcessGetState(pid,&s);printf("ctl state pid=%d -> %s %s\n",pid,en(r),r?"":st(s));return r;}
  if(!strcmp(o,"lock")){CUcheckpointLockArgs a;memset(&a,0,sizeof a);a.timeoutMs=timeout;r=cuCheckpointProcessLock(pid,&a);}
  else if(!strcmp(o,"checkpoint")){r=cuCheckpointProcessCheckpoint(pid,NULL);}
  else if(!strcmp(o,"restore")){r=cuCheckpointProcessRestore(pid,NULL);}
  else if(!strcmp(o,"unlock")){r=cuCheckpointProcessUnlock(pid,NULL);}
  else if(!strcmp(o,"tid")){int tid=0;r=cuCheckpointProcessGetRestoreThreadId(pid,&tid);printf("ctl tid pid=%d -> %s tid=%d\n",pid,en(r),tid);return r;}
  else {fprintf(stderr,"bad op\n");return 99;}
  printf("ctl %s pid=%d timeout=%u -> %s in %.1f ms\n",o,pid,timeout,en(r),now_ms()-t0);fflush(stdout);return r;
}

static unsigned *buf; static size_t nwords; static CUmemGenericAllocationHandle vh; static int vfd=-1;
static void verify(const char *tag){unsigned long long *bad;cudaMallocManaged(&bad,8);*bad=0;check<<<1024,256>>>(buf,nwords,7,bad);cudaError_t e=cudaDeviceSynchronize();printf("target %s verify: %s bad=%llu\n",tag,cudaGetErrorString(e),*bad);cudaFree(bad);fflush(stdout);}

static void *selfthr(void *arg){(void)arg;int pid=getpid();
  op("state",pid,0); op("lock",pid,5000); op("state",pid,0); op("checkpoint",pid,0); op("state",pid,0); op("restore",pid,0); op("unlock",pid,0); op("state",pid,0); return 0;}

int main(int argc,char**argv){
  if(argc<2)return 2;
  if(!strcmp(argv[1],"ctl")){ // ctl OP PID [timeout] [init]
    int pid=atoi(argv[3]);unsigned to=argc>4?atoi(argv[4]):0;
    if(argc>5&&!strcmp(argv[5],"init")){CUresult r=cuInit(0);printf("ctl cuInit -> %s\n",en(r));}
    int r=op(argv[2],pid,to); return r?1:0;}
  // target SIZE_MIB [vmm|self]
  size_t mib=atoll(argv[2]); const char *mode=argc>3?argv[3]:"plain";
  cudaFree(0);
  if(!strcmp(mode,"vmm")){
    CUdevice d;cuDeviceGet(&d,0);CUmemAllocationProp p;memset(&p,0,sizeof p);p.type=CU_MEM_ALLOCATION_TYPE_PINNED;p.location.type=CU_MEM_LOCATION_TYPE_DEVICE;p.location.id=0;p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g=0;cuMemGetAllocationGranularity(&g,&p,CU_MEM_ALLOC_GRANULARITY_MINIMUM);size_t sz=((mib<<20)+g-1)/g*g;
    CUresult r=cuMemCreate(&vh,sz,&p,0);printf("target vmm create %s\n",en(r));
    r=cuMemExportToShareableHandle(&vfd,vh,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0);printf("target vmm export %s fd=%d\n",en(r),vfd);
    CUdeviceptr va;cuMemAddressReserve(&va,sz,0,0,0);cuMemMap(va,sz,0,vh,0);CUmemAccessDesc ad;ad.location=p.location;ad.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;cuMemSetAccess(va,sz,&ad,1);
    buf=(unsigned*)va;nwords=sz/4;
  } else {
    if(cudaMalloc(&buf,mib<<20)){printf("target alloc failed\n");return 1;} nwords=(mib<<20)/4;
  }
  fill<<<1024,256>>>(buf,nwords,7);cudaDeviceSynchronize();
  printf("target ready pid=%d mib=%zu mode=%s\n",getpid(),mib,mode);fflush(stdout);
  if(!strcmp(mode,"self")){pthread_t t;alarm(60);pthread_create(&t,0,selfthr,0);pthread_join(t,0);verify("after-self");return 0;}
  char line[128];
  while(fgets(line,sizeof line,stdin)){
    if(!strncmp(line,"check",5))verify("cmd");
    else if(!strncmp(line,"spin",4)){unsigned long long ms=atoll(line+5);double t0=now_ms();printf("target spin start %llu ms\n",ms);fflush(stdout);spin<<<1,1>>>(ms*1000000ull);cudaError_t e=cudaDeviceSynchronize();printf("target spin done %s after %.1f ms\n",cudaGetErrorString(e),now_ms()-t0);fflush(stdout);}
    else if(!strncmp(line,"call",4)){double t0=now_ms();size_t f,tt;cudaError_t e=cudaMemGetInfo(&f,&tt);printf("target call memgetinfo %s after %.1f ms\n",cudaGetErrorString(e),now_ms()-t0);fflush(stdout);}
    else if(!strncmp(line,"quit",4))break;
  }
  return 0;
}
