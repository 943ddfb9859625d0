#!/usr/bin/python3
"""convert_torchvision.py -- a PyTorch/torchvision checkpoint -> a safetensors file that
glimpse.models loads (models.resnet18{weights = "resnet18.safetensors"}).

glimpse builds torchvision's architectures with torchvision's module names, so the state dict
goes across name for name: every tensor becomes float32, contiguous, under the same key
(num_batches_tracked too, as a float32 scalar).  The metadata records the architecture
("arch"), where the weights came from ("source") and "format": "pt".  The file is written
with the repository's own safetensors writer (tests/fixtures/make_fixtures.py) to a
temporary name and renamed, so an interrupted run never leaves half a file.

Usage (run with the system Python, which has python3-torch and python3-torchvision):
  /usr/bin/python3 scripts/convert_torchvision.py resnet18.pth resnet18.safetensors
  /usr/bin/python3 scripts/convert_torchvision.py model.pt out.safetensors --arch vgg16
  /usr/bin/python3 scripts/convert_torchvision.py --arch resnet18 --random --seed 0 r18.safetensors

The input may be a state dict (torch.save(model.state_dict(), path)), a whole pickled model
(torch.save(model, path)), or a training checkpoint dict holding one under "state_dict",
"model_state_dict", "model" or "state".  A "module." prefix (DataParallel) is removed.
--random writes torchvision's own random initialisation of --arch (seeded), which needs no
download.  --arch is guessed from the names when not given, and the names and shapes are
checked against torchvision's model of that architecture (--no-check skips that).
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# torch is imported after the arguments are checked (main), so --help and a mistyped path
# answer at once instead of after a second or two of importing it
torch = None

ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
         "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]
CHECKPOINT_KEYS = ["state_dict", "model_state_dict", "model", "state"]


def fail(msg):
    sys.exit(f"convert_torchvision.py: {msg}")


def load_state_dict(path):
    """Whatever torch.save wrote at path -> an ordered name -> tensor dict."""
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001  (torch.load raises many kinds)
        fail(f"cannot read {path}: {e}")
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        if obj and all(torch.is_tensor(v) for v in obj.values()):
            return obj
        for k in CHECKPOINT_KEYS:
            v = obj.get(k)
            if isinstance(v, torch.nn.Module):
                return v.state_dict()
            if isinstance(v, dict) and v and all(torch.is_tensor(t) for t in v.values()):
                return v
    fail(f"{path} holds a {type(obj).__name__}, not a state dict, a model or a checkpoint "
         f"with one under {', '.join(CHECKPOINT_KEYS)}")


def strip_prefix(sd):
    if sd and all(k.startswith("module.") for k in sd):
        return {k[len("module."):]: v for k, v in sd.items()}
    return sd


def guess_arch(sd):
    """The torchvision architecture these names belong to, or None."""
    keys = set(sd)
    if "conv1.weight" in keys and "layer1.0.conv1.weight" in keys:
        counts = []
        for layer in range(1, 5):
            blocks = {int(m.group(1)) for k in keys
                      for m in [re.match(rf"layer{layer}\.(\d+)\.", k)] if m}
            counts.append(len(blocks))
        bottleneck = "layer1.0.conv3.weight" in keys
        table = {(2, 2, 2, 2, False): "resnet18", (3, 4, 6, 3, False): "resnet34",
                 (3, 4, 6, 3, True): "resnet50", (3, 4, 23, 3, True): "resnet101",
                 (3, 8, 36, 3, True): "resnet152"}
        return table.get(tuple(counts) + (bottleneck,))
    if "features.0.weight" in keys:
        convs = sum(1 for k, v in sd.items()
                    if k.startswith("features.") and k.endswith(".weight") and v.dim() == 4)
        bn = any(k.startswith("features.") and k.endswith("running_mean") for k in keys)
        name = {8: "vgg11", 10: "vgg13", 13: "vgg16", 16: "vgg19"}.get(convs)
        return name and (name + "_bn" if bn else name)
    return None


def torchvision_model(arch, num_classes=None):
    import torchvision  # only needed here: a plain conversion works without it
    kw = {} if num_classes is None else {"num_classes": num_classes}
    return getattr(torchvision.models, arch)(**kw)


def head_size(sd, arch):
    """The number of classes of the checkpoint's head (fc / classifier.6), or None."""
    key = "fc.weight" if arch.startswith("resnet") else "classifier.6.weight"
    return sd[key].shape[0] if key in sd else None


def check_against_torchvision(sd, arch):
    ref = torchvision_model(arch, head_size(sd, arch)).state_dict()
    missing = [k for k in ref if k not in sd]
    unexpected = [k for k in sd if k not in ref]
    wrong = [f"{k}: {tuple(sd[k].shape)} != {tuple(ref[k].shape)}" for k in ref
             if k in sd and tuple(sd[k].shape) != tuple(ref[k].shape)]
    problems = []
    if missing:
        problems.append("missing: " + ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else ""))
    if unexpected:
        problems.append("unexpected: " + ", ".join(unexpected[:8]) +
                        (" ..." if len(unexpected) > 8 else ""))
    if wrong:
        problems.append("shape mismatch: " + "; ".join(wrong[:8]))
    if problems:
        fail(f"the names do not match torchvision's {arch} (--no-check to convert anyway):\n  " +
             "\n  ".join(problems))


def main():
    ap = argparse.ArgumentParser(
        description="Convert a torchvision/PyTorch state dict to safetensors for glimpse.models.",
        epilog="example: %(prog)s --arch resnet18 --random --seed 0 resnet18.safetensors")
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="INPUT.pth OUTPUT.safetensors, or only OUTPUT with --random")
    ap.add_argument("--arch", choices=ARCHS,
                    help="architecture (recorded in the metadata; guessed when not given)")
    ap.add_argument("--random", action="store_true",
                    help="write torchvision's random initialisation of --arch instead of a file")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for --random (0)")
    ap.add_argument("--no-check", action="store_true",
                    help="do not compare the names and shapes with torchvision's model")
    args = ap.parse_args()
    if not args.random and len(args.paths) == 2 and not os.path.isfile(args.paths[0]):
        fail(f"no such file: {args.paths[0]}")

    global torch
    try:
        import torch as torch_module
    except ImportError:
        fail("needs PyTorch: install python3-torch (and python3-torchvision) and run it with "
             "/usr/bin/python3")
    torch = torch_module
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    from make_fixtures import st_write  # the repo's one safetensors writer

    if args.random:
        if len(args.paths) != 1:
            ap.error("--random takes only the output path")
        if not args.arch:
            ap.error("--random needs --arch")
        torch.manual_seed(args.seed)
        sd = torchvision_model(args.arch).state_dict()
        source = f"torchvision {args.arch} random init, torch.manual_seed({args.seed})"
        out = args.paths[0]
    else:
        if len(args.paths) != 2:
            ap.error("give INPUT and OUTPUT (or --random --arch A OUTPUT)")
        src, out = args.paths
        sd = strip_prefix(load_state_dict(src))
        source = os.path.basename(src)
    arch = args.arch or guess_arch(sd)
    if arch and not args.no_check and not args.random:
        check_against_torchvision(sd, arch)

    tensors = {}
    for k, v in sd.items():
        if not torch.is_tensor(v):
            fail(f"entry {k} is a {type(v).__name__}, not a tensor")
        if v.is_complex():
            fail(f"entry {k} is complex ({v.dtype}): glimpse holds float32")
        tensors[k] = v.detach().to(torch.float32).contiguous()
    meta = {"arch": arch or "unknown", "source": source, "format": "pt",
            "converter": "scripts/convert_torchvision.py"}
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        fail(f"no such folder for the output: {out_dir}")
    st_write(out, tensors, meta)
    n = sum(t.numel() for t in tensors.values())
    print(f"wrote {out}: {len(tensors)} tensors, {n} floats, arch {meta['arch']}")


if __name__ == "__main__":
    main()
