# Parameter counts and state_dict sizes of the models in models/, built the same way
# in PyTorch (torch.nn). tests/test_models.cpp checks these numbers; run: python3 scripts/model_param_counts.py
import torch, torch.nn as nn
def norm(c): return nn.BatchNorm2d(c)
class Basic(nn.Module):
    def __init__(s, i, o, st):
        super().__init__()
        s.conv1=nn.Conv2d(i,o,3,st,1,bias=False); s.bn1=norm(o)
        s.conv2=nn.Conv2d(o,o,3,1,1,bias=False); s.bn2=norm(o)
        s.shortcut=nn.Sequential()
        if st!=1 or i!=o: s.shortcut=nn.Sequential(nn.Conv2d(i,o,1,st,bias=False), norm(o))
class ResNet(nn.Module):
    def __init__(s, widths, blocks, nc=10):
        super().__init__()
        s.conv1=nn.Conv2d(3,widths[0],3,1,1,bias=False); s.bn1=norm(widths[0])
        i=widths[0]
        for k,(w,n) in enumerate(zip(widths,blocks)):
            layers=[]
            for j in range(n):
                layers.append(Basic(i,w,(1 if k==0 else 2) if j==0 else 1)); i=w
            setattr(s,f"layer{k+1}",nn.Sequential(*layers))
        s.fc=nn.Linear(i,nc)
def cnt(m): return sum(p.numel() for p in m.parameters())
r18=ResNet([64,128,256,512],[2,2,2,2]); print("resnet18",cnt(r18), len(r18.state_dict()))
r20=ResNet([16,32,64],[3,3,3]); print("resnet20",cnt(r20), len(r20.state_dict()))
r56=ResNet([16,32,64],[9,9,9]); print("resnet56",cnt(r56), len(r56.state_dict()))
print(list(r20.state_dict().keys())[:12]); print([k for k in r20.state_dict() if 'shortcut' in k])
def small(w=1.0, inc=3):
    c=[max(1,round(b*w)) for b in (64,128,256,512)]
    L=[nn.Conv2d(inc,c[0],3,padding=1,bias=False),norm(c[0]),nn.ReLU()]
    for a,b in zip(c[:-1],c[1:]): L+=[nn.Conv2d(a,b,3,padding=1,bias=False),nn.MaxPool2d(2),norm(b),nn.ReLU()]
    L+=[nn.AdaptiveMaxPool2d(1),nn.Flatten(),nn.Linear(c[-1],10)]
    return nn.Sequential(*L)
print("smallnet", cnt(small()), "fmnist", cnt(small(1.0,1)), "w0.5", cnt(small(0.5)), "w0.125", cnt(small(0.125)))
print("mlp 3072-512-256-10", cnt(nn.Sequential(nn.Linear(3072,512),nn.ReLU(),nn.Linear(512,256),nn.ReLU(),nn.Linear(256,10))))
# GN / none variants for resnet20
def with_norm(f):
    global norm; old=norm; norm=f; m=ResNet([16,32,64],[3,3,3]); norm=old; return cnt(m)
print("resnet20 none", with_norm(lambda c: nn.Identity()), "gn", with_norm(lambda c: nn.GroupNorm(min(32,c),c)))
