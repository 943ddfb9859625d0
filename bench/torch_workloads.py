"""bench/torch_workloads.py -- the PyTorch side of the side-by-side benchmark.

Usage: /usr/bin/python3 bench/torch_workloads.py W STEPS WEIGHTS.safetensors
Loads the initial weights and inputs that bench/glimpse_workloads.lua saved (a tiny
safetensors reader: 8-byte little-endian header length, JSON header, raw float32 data),
builds the same model with ordinary torch.nn modules (named like the glimpse side's nn
modules, so the state_dict loads with strict=True), runs the first train step from those
weights (its loss is compared with glimpse's), then times STEPS steps at 1 and at 2 threads
(torch.set_num_threads) and reports the faster (wall clock, and the CPU time of that run).
Prints one JSON line on stdout.
Integer inputs arrive 1-based as float32 and are shifted to 0-based longs here.
"""
import json
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).clone()
    return out


class Additive(nn.Module):
    """Bahdanau's score as glimpse's nn.Attention{score="additive"} holds it:
    e = v . tanh(query_proj(q) + key_proj(k)), query_proj with a bias, key_proj without."""

    def __init__(self, query, key, hidden):
        super().__init__()
        self.query_proj = nn.Linear(query, hidden)
        self.key_proj = nn.Linear(key, hidden, bias=False)
        self.v = nn.Parameter(torch.zeros(hidden))


class AttDecoder(nn.Module):
    """LSTMCell fed [emb; previous ctx], additive attention, output over [h; ctx]."""

    def __init__(self, vocab, demb, dmem, hid, att):
        super().__init__()
        self.tgt_emb = nn.Embedding(vocab, demb)
        self.decoder = nn.LSTMCell(demb + dmem, hid)
        self.att = Additive(hid, dmem, att)
        self.out = nn.Linear(hid + dmem, vocab)
        self.dmem, self.hid = dmem, hid

    def forward(self, tgt_in, mem):
        B, T = tgt_in.shape
        e = self.tgt_emb(tgt_in)
        uk = self.att.key_proj(mem)                                   # keys projected once
        h = mem.new_zeros(B, self.hid)
        c = mem.new_zeros(B, self.hid)
        ctx = mem.new_zeros(B, self.dmem)
        outs = []
        for t in range(T):
            h, c = self.decoder(torch.cat([e[:, t], ctx], 1), (h, c))
            s = torch.tanh(self.att.query_proj(h).unsqueeze(1) + uk) @ self.att.v   # (B,L)
            alpha = torch.softmax(s, 1)
            ctx = torch.bmm(alpha.unsqueeze(1), mem).squeeze(1)
            outs.append(self.out(torch.cat([h, ctx], 1)))
        return torch.stack(outs, 1)


class W1(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(32, 64)
        self.encoder = nn.LSTM(64, 128, batch_first=True, bidirectional=True)
        self.dec = AttDecoder(32, 64, 256, 256, 256)

    def forward(self, inp):
        mem, _ = self.encoder(self.src_emb(inp["src"]))
        logits = self.dec(inp["tgt_in"], mem)
        return F.cross_entropy(logits.reshape(-1, 32), inp["tgt_out"].reshape(-1))


class W2(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dec = AttDecoder(32, 64, 128, 256, 256)

    def forward(self, inp):
        x = inp["images"]
        for c in (self.conv1, self.conv2, self.conv3):
            x = self.pool(F.relu(c(x)))
        B = x.shape[0]
        mem = x.reshape(B, 128, 64).transpose(1, 2)
        logits = self.dec(inp["tgt_in"], mem)
        return F.cross_entropy(logits.reshape(-1, 32), inp["tgt_out"].reshape(-1))


class Pointer(nn.Module):
    """Vinyals et al.'s pointer scores as glimpse's nn.Pointer holds them:
    u = v . tanh(key_proj(k) + query_proj(q)), both projections without bias."""

    def __init__(self, query, key, hidden):
        super().__init__()
        self.key_proj = nn.Linear(key, hidden, bias=False)
        self.query_proj = nn.Linear(query, hidden, bias=False)
        self.v = nn.Parameter(torch.zeros(hidden))

    def forward(self, q, k):
        """q (B,Tq,Dq), k (B,L,Dk) -> scores (B,Tq,L), every decoder step at once"""
        return torch.tanh(self.query_proj(q).unsqueeze(2) + self.key_proj(k).unsqueeze(1)) @ self.v


class W3(nn.Module):
    def __init__(self):
        super().__init__()
        H = 128
        self.embed = nn.Linear(2, H)
        self.encoder = nn.LSTM(H, H, batch_first=True)
        self.decoder = nn.LSTM(H, H, batch_first=True)
        self.dec_start = nn.Parameter(torch.zeros(1, 1, H))
        self.ptr = Pointer(H, H, H)

    def forward(self, inp):
        pts = inp["points"]
        B, N, _ = pts.shape
        e = self.embed(pts)
        ye, (hn, cn) = self.encoder(e)
        prev = e.reshape(B * N, -1).index_select(0, inp["dec_in_flat"]).reshape(B, N - 1, -1)
        din = torch.cat([self.dec_start.expand(B, 1, -1), prev], 1)
        yd, _ = self.decoder(din, (hn, cn))
        s = self.ptr(yd, ye)
        return F.cross_entropy(s.reshape(B * N, N), inp["targets"].reshape(-1))


class W4(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(256, 8, batch_first=True)

    def forward(self, inp):
        x = inp["x"]
        o, _ = self.mha(x, x, x, need_weights=False)
        return F.mse_loss(o, inp["y"])


MODELS = {"W1": W1, "W2": W2, "W3": W3, "W4": W4}
INT_INPUTS = {"src", "tgt_in", "tgt_out", "targets", "dec_in_flat"}


def load(W, path):
    st = read_safetensors(path)
    inp = {}
    for k, v in st.items():
        if k.startswith("input."):
            n = k[len("input."):]
            inp[n] = (v.round().long() - 1) if n in INT_INPUTS else v
    if W in MODELS:
        model = MODELS[W]()
        # the glimpse side's modules carry the same names: its state_dict loads as is
        sd = {k: v for k, v in st.items() if not k.startswith("input.")}
        model.load_state_dict(sd, strict=True)
        return model, inp
    return None, inp


def vmhwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def main():
    W, steps, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    model, inp = load(W, path)
    if model is None:   # sgemm
        a, b = inp["a"], inp["b"]
        loss1 = torch.mm(a, b).sum().item()

        def one():
            torch.mm(a, b)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def one():
            opt.zero_grad()
            loss = model(inp)
            loss.backward()
            opt.step()
            return loss
        loss1 = one().item()
    best = None
    for threads in (1, 2):
        torch.set_num_threads(threads)
        one()   # warm-up at this thread count
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            one()
        ms = (time.perf_counter() - t0) * 1000 / steps
        cpu_ms = (time.process_time() - c0) * 1000 / steps   # CPU time of all threads
        if best is None or ms < best[0]:
            best = (ms, threads, cpu_ms)
    print(json.dumps({"side": "torch", "workload": W, "loss1": loss1, "ms_per_step": best[0],
                      "cpu_ms_per_step": best[2], "threads": best[1], "steps": steps,
                      "vmhwm_kb": vmhwm(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
