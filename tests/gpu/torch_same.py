# Foundation acceptance: PyTorch behaves the same with and without cushare.
import torch
torch.manual_seed(0)
x = torch.randn(2048, 2048, device="cuda")
y = (x @ x).relu().sum()
free, total = torch.cuda.mem_get_info()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    z = torch.empty(1 << 20, device="cuda").fill_(1.0).sum()
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
w = torch.zeros(1024, device="cuda")
with torch.cuda.graph(g):
    w.add_(1)
g.replay(); g.replay()
torch.cuda.synchronize()
print(f"device={torch.cuda.get_device_name()} total_mem={total} matmul_sum={float(y):.4f} "
      f"stream_sum={float(z):.1f} graph={float(w[0]):.1f}")
