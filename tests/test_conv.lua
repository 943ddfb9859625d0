-- tests/test_conv.lua -- the conv, pooling and normalisation ops (engine/ops_conv.c, ops_pool.c,
-- engine/ops_norm.c, bindings/l_nn.c).
--
-- The im2col convolution is held against the direct-loop oracle (outputs and every
-- gradient), all ops against PyTorch (tests/fixtures/nn_*.safetensors, made by
-- tests/fixtures/fixtures_nn.py), and every backward against finite differences.
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close

local T = {}

local FIXTURES = "tests/fixtures/"
local PYTORCH_RTOL = 1e-4     -- max |glimpse - torch| relative to the tensor's largest entry
local ORACLE_RTOL = 1e-5      -- im2col + sgemm vs direct loops (float32 sums in another order)
local EXACT = 0

-- ---------------------------------------------------------------------------------------
-- helpers

local function max_abs(t)
  return t:abs():max():item()
end

local function fixture(name)
  return glimpse.load(FIXTURES .. name .. ".safetensors")
end

-- run fn(inputs...) and backward of sum(y * dy); returns y and the inputs' grads
local function forward_backward(fn, inputs, dy)
  for _, t in ipairs(inputs) do t.grad = nil end
  local y = fn(table.unpack(inputs))
  y:backward(dy)
  local grads = {}
  for i, t in ipairs(inputs) do grads[i] = t.grad end
  return y, grads
end

local function leaf(t)
  return t:clone():requires_grad()
end

-- values 0.1 apart in random order: no pooling window has a near-tie for gradcheck's eps
local function distinct(...)
  local shape = {...}
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local perm = glimpse.multinomial(glimpse.ones(n), n, false)
  return ((perm - n / 2) * 0.1):reshape(shape)
end

-- ---------------------------------------------------------------------------------------
-- conv2d: im2col against the direct loops

local CONV_CASES = {
  -- B, C, H, W, O, kh, kw, stride, padding, bias
  {2, 3, 7, 6, 4, 3, 3, 1, 0, true},
  {2, 3, 9, 8, 4, 3, 3, 2, 1, true},
  {1, 2, 6, 7, 3, 3, 2, {1, 2}, {0, 1}, false},
  {3, 1, 5, 5, 2, 1, 1, 1, 0, true},          -- 1x1
  {2, 2, 4, 4, 2, 5, 5, 1, 2, true},          -- kernel larger than the image, padded
  {2, 4, 8, 8, 3, 2, 2, 3, {1, 0}, true},     -- stride leaves a remainder
}

function T.test_conv2d_im2col_matches_direct_loops_outputs_and_grads()
  glimpse.manual_seed(11)
  for k, c in ipairs(CONV_CASES) do
    local B, C, H, W, O, kh, kw, stride, pad, bias = table.unpack(c)
    local x, w = glimpse.randn(B, C, H, W), glimpse.randn(O, C, kh, kw)
    local b = bias and glimpse.randn(O) or nil
    local opts = {stride = stride, padding = pad}
    local fast_in, slow_in = {leaf(x), leaf(w)}, {leaf(x), leaf(w)}
    if b then fast_in[3], slow_in[3] = leaf(b), leaf(b) end
    local probe = glimpse.conv2d(x, w, b, opts)
    local dy = glimpse.randn(table.unpack(probe.shape))
    local y1, g1 = forward_backward(function(a, bw, bb) return glimpse.conv2d(a, bw, bb, opts) end,
                                    fast_in, dy)
    local y2, g2 = forward_backward(function(a, bw, bb) return glimpse._conv2d_naive(a, bw, bb, opts) end,
                                    slow_in, dy)
    local what = "case " .. k
    assert_close(y1, y2, ORACLE_RTOL, what .. " output")
    for i = 1, #fast_in do assert_close(g1[i], g2[i], ORACLE_RTOL, what .. " grad " .. i) end
  end
end

-- the two layouts of engine/ops_conv.c: an image with at least 256 output pixels is a chunk
-- of its own (its product writes the output in place); smaller ones are batched into chunks
-- of about 2^18 column floats (here 64*9 rows x 15*15 columns: two images a chunk, so a batch
-- of 5 runs as 2 + 2 + 1)
local CHUNK_CASES = {
  {"one image per chunk", {3, 4, 16, 16}, {5, 4, 3, 3}},
  {"several images per chunk", {5, 64, 15, 15}, {3, 64, 3, 3}},
}

function T.test_conv2d_per_image_and_chunked_paths_match_direct_loops()
  glimpse.manual_seed(12)
  for _, c in ipairs(CHUNK_CASES) do
    local what, xs, ws = c[1], c[2], c[3]
    local x, w, b = glimpse.randn(table.unpack(xs)), glimpse.randn(table.unpack(ws)), glimpse.randn(ws[1])
    local opts = {padding = 1}
    local dy = glimpse.randn(xs[1], ws[1], xs[3], xs[4])
    local y1, g1 = forward_backward(function(a, bw, bb) return glimpse.conv2d(a, bw, bb, opts) end,
                                    {leaf(x), leaf(w), leaf(b)}, dy)
    local y2, g2 = forward_backward(function(a, bw, bb) return glimpse._conv2d_naive(a, bw, bb, opts) end,
                                    {leaf(x), leaf(w), leaf(b)}, dy)
    assert_close(y1, y2, ORACLE_RTOL, what .. ": output")
    for i = 1, 3 do assert_close(g1[i], g2[i], ORACLE_RTOL, what .. ": grad " .. i) end
  end
end

function T.test_conv2d_large_image_in_bands_matches_direct_loops()
  -- an image whose columns pass 2^20 floats (here 16*5*5 rows x 60*57 columns) is done in
  -- bands of output rows (forward), odd band ends included
  glimpse.manual_seed(13)
  local x, w, b = glimpse.randn(2, 16, 61, 57), glimpse.randn(6, 16, 5, 5), glimpse.randn(6)
  local opts = {padding = {1, 2}}
  local y1 = glimpse.no_grad(function() return glimpse.conv2d(x, w, b, opts) end)
  local y2 = glimpse.no_grad(function() return glimpse._conv2d_naive(x, w, b, opts) end)
  lu.assertEquals(y1:size(), {2, 6, 59, 57})
  assert_close(y1, y2, ORACLE_RTOL, "banded output")
end

-- 3x3 stride-1 convolutions with 16 or more channels in and out go through Winograd
-- (forward and input gradient): F(4x4, 3x3) for outputs of at least 8 x 8, else F(2x2, 3x3);
-- each case runs with both tiles forced (glimpse._winograd_tile), by size, and with Winograd
-- off (-1: the same convolutions through im2col).  Outputs that
-- are not a multiple of the tile leave part-empty edge tiles, padding 0..2 covers every
-- adjoint padding (2 - p).
local WINOGRAD_CASES = {
  -- B, C, H, W, O, padding, bias
  {2, 16, 9, 7, 16, 1, true},
  {3, 20, 8, 8, 24, 0, true},
  {2, 16, 6, 5, 18, 2, false},
  {1, 32, 5, 12, 16, {0, 2}, true},
  {2, 24, 13, 11, 20, 1, true},
  {1, 16, 131, 129, 16, 1, true},   -- 66x65 tiles of 2: too big for one chunk, done in bands
  {1, 16, 203, 198, 16, 1, false},  -- 51x50 tiles of 4: bands too
}
local WINOGRAD_RTOL = 1e-5     -- the transforms' extra rounding, relative to the largest entry

function T.test_conv2d_winograd_path_matches_direct_loops_outputs_and_grads()
  for _, tile in ipairs({2, 4, 0, -1}) do
    local prev = glimpse._winograd_tile(tile)
    local ok, err = pcall(function()
      for k, c in ipairs(WINOGRAD_CASES) do
        glimpse.manual_seed(13 + k)
        local B, C, H, W, O, pad, bias = table.unpack(c)
        local x, w = glimpse.randn(B, C, H, W), glimpse.randn(O, C, 3, 3)
        local b = bias and glimpse.randn(O) or nil
        local opts = {padding = pad}
        local fast_in, slow_in = {leaf(x), leaf(w)}, {leaf(x), leaf(w)}
        if b then fast_in[3], slow_in[3] = leaf(b), leaf(b) end
        local probe = glimpse.conv2d(x, w, b, opts)
        local dy = glimpse.randn(table.unpack(probe.shape))
        local y1, g1 = forward_backward(function(a, bw, bb) return glimpse.conv2d(a, bw, bb, opts) end,
                                        fast_in, dy)
        local y2, g2 = forward_backward(function(a, bw, bb)
          return glimpse._conv2d_naive(a, bw, bb, opts)
        end, slow_in, dy)
        local what = ("Winograd tile %d, case %d"):format(tile, k)
        assert_close(y1, y2, WINOGRAD_RTOL, what .. " output")
        for i = 1, #fast_in do assert_close(g1[i], g2[i], WINOGRAD_RTOL, what .. " grad " .. i) end
      end
    end)
    glimpse._winograd_tile(prev)
    if not ok then error(err, 0) end
  end
  lu.assertErrorMsgContains("tile must be 0 (by size), 2, 4 or -1 (off), got 3",
                            glimpse._winograd_tile, 3)
end

-- Inference keeps a small-batch call's Winograd weights (glimpse.memory().winograd_weights)
-- and uses them again until the weight's storage is written: in place through the tensor,
-- through a view of it (w[o][c][i][j] = v), by copy_, by an optimizer's step, by
-- _data_set; a weight that dies takes its entry, and a new one at the same address is not
-- mistaken for it; under autograd a weight that requires grad keeps nothing;
-- glimpse.empty_cache() gives them back
function T.test_conv2d_keeps_inference_winograd_weights_until_they_are_written()
  glimpse.empty_cache()
  local opts = {padding = 1}
  local function check(x, w, b, what)
    local y = glimpse.no_grad(function() return glimpse.conv2d(x, w, b, opts) end)
    assert_close(y, glimpse._conv2d_naive(x, w:detach(), b, opts), WINOGRAD_RTOL, what)
  end
  glimpse.manual_seed(31)
  local x, b = glimpse.randn(2, 16, 8, 8), glimpse.randn(24)
  local w = glimpse.randn(24, 16, 3, 3)
  lu.assertEquals(glimpse.memory().winograd_weights, 0)
  check(x, w, b, "first call")
  local kept = glimpse.memory().winograd_weights
  lu.assertEquals(kept, 16 * 24 * 16 * 4)          -- F(2x2,3x3): (4x4) x O x C floats
  check(x, w, b, "kept weights")
  lu.assertEquals(glimpse.memory().winograd_weights, kept)
  w:add_(glimpse.randn(24, 16, 3, 3))
  check(x, w, b, "after add_")
  w[3][5][2][2] = 7                                -- through a view
  check(x, w, b, "after a write through a view")
  w:copy_(glimpse.randn(24, 16, 3, 3))
  check(x, w, b, "after copy_")
  glimpse._data_set(w, 1, {9, -9, 9})
  check(x, w, b, "after _data_set")
  w:requires_grad()
  local opt = glimpse.optim.SGD({w}, {lr = 0.5})
  glimpse.conv2d(x, w, b, opts):sum():backward()
  opt:step()
  check(x, w, b, "after an optimizer step")
  lu.assertEquals(glimpse.memory().winograd_weights, kept)
  -- under autograd, a weight that requires grad is transformed per call
  glimpse.empty_cache()
  glimpse.conv2d(x, w, b, opts)
  lu.assertEquals(glimpse.memory().winograd_weights, 0)
  -- a weight that dies takes its entry; the next one, likely at the same address, is its own
  w, opt = nil, nil
  local w1 = glimpse.randn(24, 16, 3, 3)
  check(x, w1, b, "a new weight")
  w1 = nil
  collectgarbage(); collectgarbage()
  lu.assertEquals(glimpse.memory().winograd_weights, 0)
  local w2 = glimpse.randn(24, 16, 3, 3)
  check(x, w2, b, "the next weight")
  -- big calls (many tiles) transform per call and keep nothing
  glimpse.empty_cache()
  lu.assertEquals(glimpse.memory().winograd_weights, 0)
  check(glimpse.randn(8, 16, 40, 40), w2, b, "many tiles")
  lu.assertEquals(glimpse.memory().winograd_weights, 0)
end

function T.test_conv2d_gradcheck()
  glimpse.manual_seed(13)
  local x = glimpse.randn(2, 2, 5, 6):requires_grad()
  local w = glimpse.randn(3, 2, 3, 2):requires_grad()
  local b = glimpse.randn(3):requires_grad()
  lu.assertTrue(glimpse.gradcheck(function(a, bw, bb)
    return glimpse.conv2d(a, bw, bb, {stride = {2, 1}, padding = {1, 1}})
  end, {x, w, b}))
  lu.assertTrue(glimpse.gradcheck(function(a, bw)
    return glimpse.conv2d(a, bw, nil, {stride = 1})
  end, {x, w}))
end

function T.test_conv2d_matches_pytorch_stride2_padding1()
  local f = fixture("nn_conv2d")
  local x, w, b = leaf(f["input.x"]), leaf(f["weight.weight"]), leaf(f["weight.bias"])
  local y = glimpse.conv2d(x, w, b, {stride = 2, padding = 1})
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], PYTORCH_RTOL, "output")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
  assert_close(w.grad, f["grad.weight"], PYTORCH_RTOL, "grad weight")
  assert_close(b.grad, f["grad.bias"], PYTORCH_RTOL, "grad bias")
end

function T.test_conv2d_matches_pytorch_rectangular_no_bias()
  local f = fixture("nn_conv2d_rect")
  local x, w = leaf(f["input.x"]), leaf(f["weight.weight"])
  local y = glimpse.conv2d(x, w, nil, {stride = {1, 2}, padding = {0, 1}})
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], PYTORCH_RTOL, "output")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
  assert_close(w.grad, f["grad.weight"], PYTORCH_RTOL, "grad weight")
end

function T.test_conv2d_output_size_follows_the_formula()
  local y = glimpse.conv2d(glimpse.zeros(1, 1, 10, 7), glimpse.zeros(2, 1, 3, 2), nil,
                           {stride = {3, 2}, padding = {1, 0}})
  -- Ho = (10 + 2 - 3) // 3 + 1 = 4, Wo = (7 - 2) // 2 + 1 = 3
  lu.assertEquals(y.shape, {1, 2, 4, 3})
end

function T.test_conv2d_bad_shapes_raise_errors_naming_the_op_and_shapes()
  local x = glimpse.zeros(1, 3, 5, 5)
  lu.assertErrorMsgContains("3 channels", glimpse.conv2d, x, glimpse.zeros(2, 4, 3, 3))
  lu.assertErrorMsgContains("bias [3] must be (2)", glimpse.conv2d, x, glimpse.zeros(2, 3, 3, 3),
                            glimpse.zeros(3))
  lu.assertErrorMsgContains("smaller than the 7x7 kernel", glimpse.conv2d, x,
                            glimpse.zeros(2, 3, 7, 7))
  lu.assertErrorMsgContains("must be (B,C,H,W)", glimpse.conv2d, glimpse.zeros(3, 5, 5),
                            glimpse.zeros(2, 3, 3, 3))
  lu.assertErrorMsgContains("stride", glimpse.conv2d, x, glimpse.zeros(2, 3, 3, 3), nil,
                            {stride = 0})
  lu.assertErrorMsgContains("stride", glimpse.conv2d, x, glimpse.zeros(2, 3, 3, 3), nil,
                            {stride = "two"})
end

-- ---------------------------------------------------------------------------------------
-- pooling

function T.test_max_pool2d_matches_pytorch()
  local f = fixture("nn_max_pool2d")
  local x = leaf(f["input.x"])
  local y = glimpse.max_pool2d(x, 3, 2, 1)
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], EXACT, "output")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
end

function T.test_avg_pool2d_matches_pytorch_padding_counted()
  local f = fixture("nn_avg_pool2d")
  local x = leaf(f["input.x"])
  local y = glimpse.avg_pool2d(x, 3, 2, 1)
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], PYTORCH_RTOL, "output")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
end

function T.test_max_pool2d_gradient_goes_to_the_maximum_only()
  local x = glimpse.tensor({{{{1, 5}, {3, 2}}}}):requires_grad()
  local y = glimpse.max_pool2d(x, 2)
  lu.assertEquals(y:totable(), {{{{5}}}})
  y:sum():backward()
  lu.assertEquals(x.grad:totable(), {{{{0, 1}, {0, 0}}}})
end

function T.test_max_pool2d_2x2_fast_path_matches_a_reshape_and_max()
  -- 2x2 windows with stride 2 take a vectorised path; hold it against max over a reshape
  glimpse.manual_seed(18)
  local x = distinct(3, 2, 6, 10)
  local dy = glimpse.randn(3, 2, 3, 5)
  local a, b = leaf(x), leaf(x)
  local y1 = glimpse.max_pool2d(a, 2)
  local y2 = b:reshape(3, 2, 3, 2, 5, 2):permute(1, 2, 3, 5, 4, 6):reshape(3, 2, 3, 5, 4):max(5)
  y1:backward(dy)
  y2:backward(dy)
  assert_close(y1, y2, EXACT, "output")
  assert_close(a.grad, b.grad, EXACT, "grad")
  -- no graph: the same values
  assert_close(glimpse.max_pool2d(x, 2), y2, EXACT, "output without grad")
end

function T.test_max_pool2d_2x2_odd_sizes_leave_the_uncovered_edge_without_gradient()
  -- the fast backward writes whole rows; an odd last row and column belong to no window
  glimpse.manual_seed(19)
  local x = distinct(2, 3, 5, 7)
  local dy = glimpse.randn(2, 3, 2, 3)
  local a, b = leaf(x), leaf(x)
  glimpse.max_pool2d(a, 2):backward(dy)
  local crop = b:narrow(3, 1, 4):narrow(4, 1, 6)
  crop:reshape(2, 3, 2, 2, 3, 2):permute(1, 2, 3, 5, 4, 6):reshape(2, 3, 2, 3, 4):max(5):backward(dy)
  assert_close(a.grad, b.grad, EXACT, "grad")
  lu.assertEquals(a.grad:narrow(3, 5, 1):abs():sum():item(), 0)
  lu.assertEquals(a.grad:narrow(4, 7, 1):abs():sum():item(), 0)
  -- a second backward adds to the existing gradient (the scatter path)
  glimpse.max_pool2d(a, 2):backward(dy)
  assert_close(a.grad, b.grad * 2, EXACT, "accumulated grad")
end

function T.test_max_pool2d_ties_send_the_gradient_to_the_first_in_scan_order()
  for _, k in ipairs({2, 3}) do           -- the 2x2 fast path and the general loop
    local x = glimpse.ones(1, 1, k, k):requires_grad()
    glimpse.max_pool2d(x, k):sum():backward()
    local g = x.grad:reshape(k * k):totable()
    lu.assertEquals(g[1], 1)
    for i = 2, k * k do lu.assertEquals(g[i], 0) end
  end
end

function T.test_max_pool2d_propagates_nan()
  for _, k in ipairs({2, 3}) do
    local x = glimpse.zeros(1, 1, k, k)
    x:reshape(k * k)[k * k] = 0 / 0
    local y = glimpse.max_pool2d(x, k):item()
    lu.assertTrue(y ~= y, "window " .. k .. " gave " .. y)
  end
end

function T.test_max_pool2d_without_indices_matches_the_indexed_path()
  -- under no_grad (no indices kept) windows other than 2x2 take the separable two-pass path;
  -- it must give what the indexed path gives, against PyTorch too, NaN included
  local f = fixture("nn_max_pool2d")
  local y = glimpse.no_grad(function() return glimpse.max_pool2d(f["input.x"], 3, 2, 1) end)
  assert_close(y, f["output.y"], EXACT, "fixture, no indices")
  glimpse.manual_seed(3)
  for _, c in ipairs({{3, 2, 1}, {3, 1, 1}, {2, 1, 0}, {5, 3, 2}, {3, 3, 0}, {4, 2, 1}}) do
    local x = glimpse.randn(2, 3, 11, 9)
    local want = glimpse.max_pool2d(x:clone():requires_grad(), c[1], c[2], c[3]):detach()
    local got = glimpse.no_grad(function() return glimpse.max_pool2d(x, c[1], c[2], c[3]) end)
    lu.assertEquals(got:ne(want):sum():item(), 0, table.concat(c, ","))
  end
  local x = glimpse.zeros(1, 1, 5, 5)
  x:reshape(25)[13] = 0 / 0
  local y = glimpse.no_grad(function() return glimpse.max_pool2d(x, 3, 2, 1) end)
  local got = y:reshape(9):totable()
  for i, v in ipairs(got) do   -- only the middle window holds the NaN; the rest are 0
    if i == 5 then lu.assertTrue(v ~= v, "the NaN window") else lu.assertEquals(v, 0) end
  end
end

function T.test_pooling_gradcheck()
  glimpse.manual_seed(14)
  local x = distinct(2, 2, 7, 6):requires_grad()
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.max_pool2d(a, 2) end, {x}))
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.max_pool2d(a, {3, 2}, {2, 1}, {1, 0}) end, {x}))
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.avg_pool2d(a, 3, 2, 1) end, {x}))
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.avg_pool2d(a, 2) end, {x}))
end

function T.test_pooling_stride_defaults_to_kernel_and_padding_is_limited()
  lu.assertEquals(glimpse.max_pool2d(glimpse.zeros(1, 1, 8, 6), 2).shape, {1, 1, 4, 3})
  lu.assertEquals(glimpse.avg_pool2d(glimpse.zeros(1, 1, 8, 6), {4, 3}).shape, {1, 1, 2, 2})
  lu.assertErrorMsgContains("at most half", glimpse.max_pool2d, glimpse.zeros(1, 1, 8, 8), 2, 2, 2)
end

-- ---------------------------------------------------------------------------------------
-- layer norm

function T.test_layer_norm_matches_pytorch()
  local f = fixture("nn_layer_norm")
  local x, w, b = leaf(f["input.x"]), leaf(f["weight.weight"]), leaf(f["weight.bias"])
  local y = glimpse.layer_norm(x, w, b, 1e-5)
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], PYTORCH_RTOL, "output")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
  assert_close(w.grad, f["grad.weight"], PYTORCH_RTOL, "grad weight")
  assert_close(b.grad, f["grad.bias"], PYTORCH_RTOL, "grad bias")
end

function T.test_layer_norm_rows_have_zero_mean_unit_variance()
  glimpse.manual_seed(15)
  local y = glimpse.layer_norm(glimpse.randn(4, 16) * 3 + 5, nil, nil, 0)
  lu.assertTrue(max_abs(y:mean(2)) < 1e-5)
  lu.assertTrue(max_abs(y:var(2, false, false) - 1) < 1e-4)
end

function T.test_layer_norm_gradcheck()
  glimpse.manual_seed(16)
  local x = glimpse.randn(3, 2, 6):requires_grad()
  local w, b = glimpse.randn(6):requires_grad(), glimpse.randn(6):requires_grad()
  lu.assertTrue(glimpse.gradcheck(function(a, ww, bb) return glimpse.layer_norm(a, ww, bb) end,
                                  {x, w, b}))
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.layer_norm(a) end, {x}))
end

function T.test_layer_norm_weight_of_the_wrong_size_is_an_error()
  lu.assertErrorMsgContains("weight [5] must be (6)", glimpse.layer_norm, glimpse.zeros(2, 6),
                            glimpse.zeros(5))
end

-- ---------------------------------------------------------------------------------------
-- batch norm

function T.test_batch_norm2d_training_step_matches_pytorch()
  local f = fixture("nn_batch_norm2d")
  local x, w, b = leaf(f["input.x"]), leaf(f["weight.weight"]), leaf(f["weight.bias"])
  local rm, rv = glimpse.zeros(3), glimpse.ones(3)
  local y = glimpse.batch_norm2d(x, w, b, rm, rv, true, 0.1, 1e-5)
  y:backward(f["input.dy"])
  assert_close(y, f["output.y"], PYTORCH_RTOL, "output")
  assert_close(rm, f["state.running_mean"], PYTORCH_RTOL, "running mean")
  assert_close(rv, f["state.running_var"], PYTORCH_RTOL, "running var (unbiased update)")
  assert_close(x.grad, f["grad.x"], PYTORCH_RTOL, "grad input")
  assert_close(w.grad, f["grad.weight"], PYTORCH_RTOL, "grad weight")
  assert_close(b.grad, f["grad.bias"], PYTORCH_RTOL, "grad bias")
  local ye = glimpse.batch_norm2d(f["input.x"], w, b, rm, rv, false, 0.1, 1e-5)
  assert_close(ye, f["output.y_eval"], PYTORCH_RTOL, "eval output with the running stats")
end

function T.test_batch_norm2d_eval_leaves_running_stats_alone()
  local rm, rv = glimpse.tensor({1, 2}), glimpse.tensor({3, 4})
  local x = glimpse.randn(4, 2, 3, 3)
  local y = glimpse.batch_norm2d(x, nil, nil, rm, rv, false, 0.1, 0)
  lu.assertEquals(rm:totable(), {1, 2})
  lu.assertEquals(rv:totable(), {3, 4})
  -- channel 1: (x - 1) / sqrt(3)
  local expect = (x:narrow(2, 1, 1) - 1) / math.sqrt(3)
  assert_close(y:narrow(2, 1, 1), expect, 1e-6, "eval normalisation")
end

function T.test_batch_norm_eval_in_place_gives_the_same_bits_as_batch_norm_then_relu()
  glimpse.manual_seed(23)
  local x = glimpse.randn(4, 32, 9, 9)                 -- above the pool's threshold
  local w, b = glimpse.randn(32), glimpse.randn(32)
  local rm, rv = glimpse.randn(32), glimpse.rand(32) + 0.5
  local y = glimpse.batch_norm2d(x, w, b, rm, rv, false, 0.1, 1e-5)
  for _, relu in ipairs({false, true}) do
    local z = x:clone()
    local r = glimpse.no_grad(function()
      return glimpse.batch_norm_eval_(z, w, b, rm, rv, 1e-5, relu)
    end)
    lu.assertTrue(rawequal(r, z))
    local expect = relu and y:relu() or y
    lu.assertEquals(z:ne(expect):sum():item(), 0, "relu " .. tostring(relu))
  end
  -- with the tape on it refuses (it would change a map in place); shapes are checked
  lu.assertErrorMsgContains("only without a tape", glimpse.batch_norm_eval_, x:clone(), w, b, rm, rv)
  glimpse.no_grad(function()
    lu.assertErrorMsgContains("running_mean", glimpse.batch_norm_eval_, x:clone(), w, b,
                              glimpse.zeros(3), rv)
  end)
end

function T.test_batch_norm_gradcheck_train_and_eval()
  glimpse.manual_seed(17)
  local x = glimpse.randn(3, 2, 3, 2):requires_grad()
  local w, b = glimpse.randn(2):requires_grad(), glimpse.randn(2):requires_grad()
  lu.assertTrue(glimpse.gradcheck(function(a, ww, bb)
    return glimpse.batch_norm2d(a, ww, bb, nil, nil, true)
  end, {x, w, b}))
  local rm, rv = glimpse.tensor({0.5, -0.5}), glimpse.tensor({2, 0.5})
  lu.assertTrue(glimpse.gradcheck(function(a, ww, bb)
    return glimpse.batch_norm2d(a, ww, bb, rm, rv, false)
  end, {x, w, b}))
  local x2 = glimpse.randn(5, 3):requires_grad()      -- (B,C): BatchNorm1d's layout
  lu.assertTrue(glimpse.gradcheck(function(a) return glimpse.batch_norm2d(a, nil, nil, nil, nil, true) end,
                                  {x2}))
end

function T.test_batch_norm_one_value_per_channel_in_training_is_an_error()
  lu.assertErrorMsgContains("more than 1 value per channel", glimpse.batch_norm2d,
                            glimpse.zeros(1, 3, 1, 1), nil, nil, glimpse.zeros(3), glimpse.ones(3), true)
end

return T
