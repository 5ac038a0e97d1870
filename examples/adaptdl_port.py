"""An AdaptDL training script, ported to pyddstore by changing its imports only.

The script below is written as AdaptDL's examples are (adaptdl.torch's
init_process_group, AdaptiveDataParallel, AdaptiveDataLoader with
autoscale_batch_size, remaining_epochs_until, Accumulator, to_tensorboard).
The only changed lines are the two imports marked "port:". Run:

    mpiexec -n 4 python examples/adaptdl_port.py [--epochs 4] [--logdir DIR]

Every rank loads its share of the datasets into DDStore (AdaptiveDataLoader
does it for a plain dataset); the batch size adapts to the measured goodput.
"""

import argparse
import os

import torch  # before mpi4py starts MPI, as pyddstore.torch requires
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

# import adaptdl                       # port: not needed
# import adaptdl.torch as adl          # port: was this line
import pyddstore.torch.adaptive as adl  # port: is this line

parser = argparse.ArgumentParser(description="AdaptDL-style training of a small classifier")
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--bs", type=int, default=32, help="initial global batch size")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--autoscale-bsz", dest="autoscale_bsz", default=True, action="store_true")
parser.add_argument("--logdir", default=os.getenv("ADAPTDL_TENSORBOARD_LOGDIR", "/tmp/adaptdl-port"))
args = parser.parse_args()


class Blobs(torch.utils.data.Dataset):
    """Ten noisy Gaussian blobs in 32 dimensions (stands in for CIFAR-10)."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        centers = torch.randn(10, 32, generator=torch.Generator().manual_seed(0)) * 0.6
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.x = centers[self.y] + torch.randn(n, 32, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


adl.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
device = "cuda" if torch.cuda.is_available() else "cpu"

trainset, testset = Blobs(4096, seed=1), Blobs(1024, seed=2)
trainloader = adl.AdaptiveDataLoader(trainset, batch_size=args.bs, shuffle=True, num_workers=2,
                                     drop_last=True)
validloader = adl.AdaptiveDataLoader(testset, batch_size=128, shuffle=False, num_workers=2)
if args.autoscale_bsz:
    trainloader.autoscale_batch_size(1024, local_bsz_bounds=(8, 128), gradient_accumulation=True)

net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
net = net.to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [3])
net = adl.AdaptiveDataParallel(net, optimizer, lr_scheduler)


def train(epoch):
    print(f"\nEpoch: {epoch}")
    net.train()
    stats = adl.Accumulator()
    for inputs, targets in trainloader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = F.cross_entropy(outputs, targets)
        loss.backward()
        optimizer.step()

        stats["loss_sum"] += loss.item() * targets.size(0)
        _, predicted = outputs.max(1)
        stats["total"] += targets.size(0)
        stats["correct"] += predicted.eq(targets).sum().item()

    trainloader.to_tensorboard(writer, epoch, tag_prefix="AdaptDL/Data/")
    net.to_tensorboard(writer, epoch, tag_prefix="AdaptDL/Model/")
    with stats.synchronized():
        stats["loss_avg"] = stats["loss_sum"] / stats["total"]
        stats["accuracy"] = stats["correct"] / stats["total"]
        writer.add_scalar("Loss/Train", stats["loss_avg"], epoch)
        writer.add_scalar("Accuracy/Train", stats["accuracy"], epoch)
        print("Train:", stats, f"batch {trainloader.current_local_bsz} x "
              f"{trainloader.accumulation_steps + 1} per replica, {trainloader.current_batch_size} total")


def valid(epoch):
    net.eval()
    stats = adl.Accumulator()
    with torch.no_grad():
        for inputs, targets in validloader:
            inputs, targets = inputs.to(device), targets.to(device)
            outputs = net(inputs)
            loss = F.cross_entropy(outputs, targets)

            stats["loss_sum"] += loss.item() * targets.size(0)
            _, predicted = outputs.max(1)
            stats["total"] += targets.size(0)
            stats["correct"] += predicted.eq(targets).sum().item()

    with stats.synchronized():
        stats["loss_avg"] = stats["loss_sum"] / stats["total"]
        stats["accuracy"] = stats["correct"] / stats["total"]
        writer.add_scalar("Loss/Valid", stats["loss_avg"], epoch)
        writer.add_scalar("Accuracy/Valid", stats["accuracy"], epoch)
        print("Valid:", stats)
        return stats["accuracy"]


with SummaryWriter(os.path.join(args.logdir, f"rank{torch.distributed.get_rank()}")) as writer:
    for epoch in adl.remaining_epochs_until(args.epochs):
        train(epoch)
        accuracy = valid(epoch)
        lr_scheduler.step()

print(f"final validation accuracy {accuracy:.3f}")
