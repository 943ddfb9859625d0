-- tests/test_parallel.lua -- the engine's thread pool (engine/parallel.c) and the op families
-- that run on it: every family gives the same bits on one thread and on two, at sizes above
-- the pool's threshold (GL_PAR_MIN_WORK, 2^15 operations), forward and backward, and the one
-- thread setting (glimpse.set_num_threads) reaches both the pool and OpenBLAS.
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

local function leaf(...) return glimpse.randn(...):requires_grad() end

-- Run make() under 1 and then 2 threads from the same seed; make returns a list of tensors
-- (outputs and gradients).  Every pair must be equal element for element (no NaN here).
local function same_bits(name, make)
  local before = glimpse.get_num_threads()
  local runs = {}
  for i, n in ipairs({1, 2}) do
    glimpse.set_num_threads(n)
    glimpse.manual_seed(11)
    runs[i] = make()
  end
  glimpse.set_num_threads(before)
  lu.assertEquals(#runs[1], #runs[2], name)
  for k = 1, #runs[1] do
    local a, b = runs[1][k], runs[2][k]
    lu.assertEquals(a:size(), b:size(), name .. " #" .. k)
    lu.assertFalse(a:has_nan(), name .. " #" .. k .. " has NaN")
    local differ = a:ne(b):sum():item()
    lu.assertEquals(differ, 0, string.format("%s: result #%d differs in %d places between 1 and 2 threads",
                                             name, k, differ))
  end
end

-- the gradients of the leaves after backward of sum(out * a fixed random weight)
local function backward_through(out, leaves)
  local w = glimpse.randn(table.unpack(out:size()))
  ;(out * w):sum():backward()
  local r = {out:detach()}
  for _, l in ipairs(leaves) do r[#r + 1] = l.grad end
  return r
end

function T.test_set_num_threads_sets_the_pool_and_blas_together()
  local before = glimpse.get_num_threads()
  glimpse.set_num_threads(1)
  lu.assertEquals(glimpse.get_num_threads(), 1)
  lu.assertEquals(glimpse.blas_info().threads, 1)
  glimpse.set_num_threads(2)
  lu.assertEquals(glimpse.get_num_threads(), 2)
  lu.assertEquals(glimpse.blas_info().threads, 2)
  glimpse.set_num_threads(before)
  lu.assertErrorMsgContains("thread count must be >= 1", glimpse.set_num_threads, 0)
end

function T.test_blas_products_same_bits_on_1_and_2_threads()
  -- OpenBLAS splits a threaded product by rows and columns of the result, never along K
  same_bits("matmul (threaded in OpenBLAS) and bmm (side by side on the pool)", function()
    local a, b = glimpse.randn(512, 256), glimpse.randn(256, 512)
    local p, q, w = leaf(16, 40, 30), leaf(16, 30, 50), leaf(30, 50)
    local y, z = p:bmm(q), p:matmul(w)              -- per-item B, and one B shared by all
    local r = backward_through(y + z, {p, q, w})
    r[#r + 1] = a:matmul(b)
    return r
  end)
  -- mid-size products (2^21 to 2^26 multiply-adds) are cut into blocks on the pool: along
  -- N, along M, with every transposition linear and its backward use
  same_bits("mid-size products cut into blocks", function()
    local x, w, bias = leaf(64, 320), leaf(1024, 320), leaf(1024)
    local u, v = leaf(1000, 100), leaf(100, 60)
    local y = glimpse.linear(x, w, bias)                           -- (64 x 320) @ (1024 x 320)^T
    local z = u:matmul(v)                                          -- 1000 rows: cut along M
    local r = backward_through(y, {x, w, bias})
    for _, t in ipairs(backward_through(z, {u, v})) do r[#r + 1] = t end
    return r
  end)
end

function T.test_elementwise_unary_binary_broadcast_scalar_same_on_1_and_2_threads()
  same_bits("unary", function()
    local x = leaf(256, 300)
    local r = {}
    for _, f in ipairs({"exp", "tanh", "sigmoid", "relu", "abs", "gelu", "softplus", "sin"}) do
      local y = x[f](x)
      r[#r + 1] = y:detach()
    end
    local y = x:tanh() + x:sigmoid() * x:exp()     -- the gradient buffer is added into too
    for _, t in ipairs(backward_through(y, {x})) do r[#r + 1] = t end
    return r
  end)
  same_bits("binary with broadcasting", function()
    local a, b, c = leaf(64, 40, 50), leaf(40, 1), leaf(50)
    local y = (a * b - c) / (b:abs() + 1) + glimpse.maximum(a, c)
    return backward_through(y, {a, b, c})
  end)
  same_bits("scalar ops, clamp, leaky_relu, pow", function()
    local x = leaf(300, 256)
    local y = (x * 3 + 1):clamp(-2, 2) + x:leaky_relu(0.1) + (x:abs() + 1) ^ 1.5 + 2 / (x:abs() + 1)
    return backward_through(y, {x})
  end)
end

function T.test_permute_same_on_1_and_2_threads()
  same_bits("permute, reshape, narrow and cat, forward and backward", function()
    local x = leaf(16, 64, 3, 8, 32)
    local y = x:permute(3, 1, 4, 2, 5)               -- multi-head attention's head split
    local z = x:transpose(2, 4) * 2
    local w1, w2 = glimpse.randn(table.unpack(y:size())), glimpse.randn(table.unpack(z:size()))
    -- and the slab ops' gradient adds: reshape, narrow on an inner dim, cat
    local u = x:reshape(16 * 64, 768):narrow(2, 5, 600)
    local v = glimpse.cat({x:reshape(16, 64, 768), x:reshape(16, 64, 768):narrow(3, 1, 100)}, 3)
    local w3, w4 = glimpse.randn(table.unpack(u:size())), glimpse.randn(table.unpack(v:size()))
    ;((y * w1):sum() + (z * w2):sum() + (u * w3):sum() + (v * w4):sum()):backward()
    return {y:detach(), z:detach(), x.grad}
  end)
end

function T.test_reductions_softmax_and_losses_same_on_1_and_2_threads()
  same_bits("sum, mean, logsumexp over each dim", function()
    local x = leaf(40, 60, 30)
    local y = x:sum(1):sum() + x:mean(2):sum() + x:logsumexp(3):sum() + x:sum(3):mean()
    y:backward()
    return {y:detach(), x.grad, x:sum(2):detach(), x:logsumexp(1):detach()}
  end)
  same_bits("softmax, masked softmax, log_softmax", function()
    local x = leaf(64, 50, 40)
    local mask = glimpse.rand(64, 1, 40):gt(glimpse.full({64, 1, 40}, 0.3))
    local y = x:softmax(3) + glimpse.softmax(x, 2) + x:log_softmax(3) + glimpse.softmax(x, 3, mask)
    return backward_through(y, {x})
  end)
  same_bits("mse_loss and bce_loss", function()
    local a, b = leaf(300, 200), glimpse.rand(300, 200)
    local p = glimpse.sigmoid(leaf(300, 200))
    local l = glimpse.mse_loss(a, b) + glimpse.bce_loss(p, b) + glimpse.mse_loss(a, b, {reduction = "sum"}) * 0.5
    l:backward()
    return {l:detach(), a.grad}
  end)
  same_bits("cross_entropy", function()
    local logits = leaf(512, 100)
    local targets = (glimpse.rand(512) * 100):floor() + 1
    local l = glimpse.cross_entropy(logits, targets, {label_smoothing = 0.1})
    l:backward()
    return {l:detach(), logits.grad}
  end)
end

function T.test_attention_ops_same_on_1_and_2_threads()
  local att = glimpse._attention
  same_bits("additive and dot attention", function()
    local B, L, H, Dv = 64, 40, 48, 32
    local wq, uk, v, vals = leaf(B, H), leaf(B, L, H), leaf(H), leaf(B, L, Dv)
    local mask = glimpse.rand(B, L):gt(glimpse.full({B, L}, 0.2))
    local ctx, alpha = att.additive(wq, uk, v, vals, mask)
    local q, keys = leaf(B, H), leaf(B, L, H)
    local ctx2, alpha2 = att.dot(q, keys, vals, mask, nil, 0.2)
    local e = leaf(B, L)
    local ctx3 = att.context(e, vals, mask)
    local w1, w2 = glimpse.randn(B, Dv), glimpse.randn(B, L)
    ;((ctx + ctx2 + ctx3) * w1):sum():add((alpha * w2):sum()):add((alpha2 * w2):sum()):backward()
    return {ctx:detach(), alpha:detach(), ctx2:detach(), wq.grad, uk.grad, v.grad, vals.grad,
            q.grad, keys.grad, e.grad}
  end)
  same_bits("multi-head probabilities (batched products on the pool)", function()
    local q, k = leaf(32, 40, 16), leaf(32, 40, 16)
    local mask = glimpse.rand(8, 40):gt(glimpse.full({8, 40}, 0.1))
    local p = att.mh_probs(q, k, mask, 4, true, 0.25)
    return backward_through(p, {q, k})
  end)
  same_bits("fused multi-head self-attention (one head per pool unit)", function()
    local qkv = leaf(8, 40, 96)
    local mask = glimpse.rand(8, 40):gt(glimpse.full({8, 40}, 0.1))
    local ctx, p = att.mh_packed(qkv, mask, 4, true, 0.25, true)
    return backward_through(glimpse.cat({ctx:reshape(8, -1), p:reshape(8, -1)}, 2), {qkv})
  end)
end

function T.test_convolution_and_pooling_same_on_1_and_2_threads()
  same_bits("conv2d im2col, Winograd, 1x1 and strided", function()
    local x = leaf(4, 16, 20, 20)
    local w3, w1, w7 = leaf(24, 16, 3, 3), leaf(24, 16, 1, 1), leaf(8, 16, 7, 7)
    local b = leaf(24)
    local y3 = glimpse.conv2d(x, w3, b, {padding = 1})               -- Winograd both ways
    local y1 = glimpse.conv2d(x, w1, b)                              -- 1x1: no im2col
    local y7 = glimpse.conv2d(x, w7, nil, {stride = 2, padding = 3}) -- im2col, strided
    local ys = glimpse.conv2d(x, w3, b, {stride = 2})                -- im2col, 3x3 stride 2
    local xl = glimpse.randn(1, 16, 70, 66)                           -- columns in bands
    local yl = glimpse.no_grad(function() return glimpse.conv2d(xl, w7, nil, {padding = 3}) end)
    local xw, ww = glimpse.randn(1, 16, 131, 129), glimpse.randn(16, 16, 3, 3)  -- Winograd bands
    local yw = glimpse.no_grad(function() return glimpse.conv2d(xw, ww, nil, {padding = 1}) end)
    local xc, wc = leaf(5, 64, 15, 15), leaf(3, 64, 3, 3)           -- 2 images per chunk
    local yc = glimpse.conv2d(xc, wc, nil, {padding = 1})
    local r = {}
    for _, y in ipairs({y3, y1, y7, ys, yc}) do
      local wt = glimpse.randn(table.unpack(y:size()))
      r[#r + 1] = (y * wt):sum()
    end
    ;(r[1] + r[2] + r[3] + r[4] + r[5]):backward()   -- weight gradients in groups of chunks
    return {y3:detach(), y1:detach(), y7:detach(), ys:detach(), yl, yw, x.grad, w3.grad, w1.grad,
            w7.grad, b.grad, yc:detach(), xc.grad, wc.grad}
  end)
  same_bits("max and average pooling", function()
    local x = leaf(4, 32, 24, 24)
    local y = glimpse.max_pool2d(x, 2) * 2
    local z = glimpse.max_pool2d(x, 3, 2, 1) + glimpse.avg_pool2d(x, 3, 2, 1)
    local w1, w2 = glimpse.randn(table.unpack(y:size())), glimpse.randn(table.unpack(z:size()))
    ;((y * w1):sum() + (z * w2):sum()):backward()
    return {y:detach(), z:detach(), x.grad}
  end)
  same_bits("batch norm and layer norm", function()
    local x = leaf(8, 32, 16, 16)
    local w, b = leaf(32), leaf(32)
    local rm, rv = glimpse.zeros(32), glimpse.ones(32)
    local y = glimpse.batch_norm2d(x, w, b, rm, rv, true)
    local z = leaf(256, 200)
    local lw, lb = leaf(200), leaf(200)
    local u = glimpse.layer_norm(z, lw, lb)
    local w1, w2 = glimpse.randn(table.unpack(y:size())), glimpse.randn(256, 200)
    ;((y * w1):sum() + (u * w2):sum()):backward()
    return {y:detach(), u:detach(), rm, rv, x.grad, w.grad, b.grad, z.grad, lw.grad, lb.grad}
  end)
end

function T.test_recurrent_sequences_same_on_1_and_2_threads()
  same_bits("lstm_seq and gru_seq with a mask", function()
    local B, Tn, H = 64, 6, 64
    local mask = glimpse.ones(B, Tn)
    for b = 1, B, 3 do for t = 5, Tn do mask[b][t] = 0 end end
    local xl, wl, bl = leaf(B, Tn, 4 * H), leaf(4 * H, H), leaf(4 * H)
    local h0, c0 = leaf(B, H), leaf(B, H)
    local y, h, c = glimpse.lstm_seq(xl, h0, c0, wl, bl, mask)
    local xg, wg = leaf(B, Tn, 3 * H), leaf(3 * H, H)
    local yg, hg = glimpse.gru_seq(xg, h0, wg, nil, mask, true)
    local w1 = glimpse.randn(B, Tn, H)
    ;((y * w1):sum() + (yg * w1):sum() + h:sum() + c:sum() + hg:sum()):backward()
    return {y:detach(), yg:detach(), xl.grad, wl.grad, bl.grad, h0.grad, c0.grad, xg.grad, wg.grad}
  end)
end

function T.test_optimizer_updates_same_on_1_and_2_threads()
  local optim = glimpse.optim
  same_bits("Adam, AdamW and SGD with momentum", function()
    local r = {}
    for _, make in ipairs({function(p) return optim.Adam({p}, {lr = 0.01, weight_decay = 0.1}) end,
                           function(p) return optim.AdamW({p}, {lr = 0.01, amsgrad = true}) end,
                           function(p) return optim.SGD({p}, {lr = 0.1, momentum = 0.9, nesterov = true}) end}) do
      local p = leaf(300, 257)
      local opt = make(p)
      for _ = 1, 3 do
        opt:zero_grad()
        ;(p * p * glimpse.randn(300, 257)):sum():backward()
        opt:step()
      end
      r[#r + 1] = p:detach()
    end
    return r
  end)
end

return T
