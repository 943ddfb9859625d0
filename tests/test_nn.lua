-- tests/test_nn.lua -- the Module system and layers (bindings/glimpse/nn/) and the
-- initialisers (glimpse.init, bindings/glimpse/nn_init.lua).
--
-- Registration and naming (PyTorch's state_dict names), state_dict round trips and load
-- errors, train/eval effects, printing, gradient checks through every layer, and the
-- statistics of the initialisers.
local lu = require "luaunit"
local glimpse = require "glimpse"
local assert_close = require("tests.helpers").assert_close

local nn, init = glimpse.nn, glimpse.init

local T = {}

local PYTORCH_RTOL = 1e-4    -- relative to the largest entry, as in test_conv.lua
local ORTHO_TOL = 1e-5       -- |Q Q^T - I| for orthogonal_ in float32
local STAT_SAMPLES = 20000   -- elements drawn to check an initialiser's spread
local STAT_RTOL = 0.05       -- sample std / bound within 5% of the formula

-- ---------------------------------------------------------------------------------------
-- helpers

local function max_abs(t)
  return t:abs():max():item()
end

local function names_of(iter_owner, method)
  local out = {}
  for name in iter_owner[method](iter_owner) do out[#out + 1] = name end
  return out
end

local function tmpfile(suffix)
  local p = os.tmpname()
  os.remove(p)
  return p .. suffix
end

local function small_cnn()
  return nn.Sequential{
    nn.Conv2d(1, 3, 3, {padding = 1}), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(3 * 3 * 3, 4), nn.LayerNorm(4),
  }
end

-- ---------------------------------------------------------------------------------------
-- registration and names

local Net = nn.Module:extend("Net")
function Net:init(d)
  self.scale = glimpse.ones(d):requires_grad()
  self.encoder = nn.Linear(d, d)
  self:register_buffer("steps", glimpse.zeros(1))
  self.head = nn.Sequential{nn.Tanh(), nn.Linear(d, 2)}
  self.note = "not a parameter"
  self.cache = glimpse.zeros(d)          -- a tensor not requiring grad: a plain field
end
function Net:forward(x)
  return self.head(self.encoder(x) * self.scale)
end

function T.test_fields_register_parameters_buffers_and_children_in_order()
  local m = Net(3)
  lu.assertEquals(names_of(m, "named_parameters"),
                  {"scale", "encoder.weight", "encoder.bias", "head.1.weight", "head.1.bias"})
  lu.assertEquals(names_of(m, "named_buffers"), {"steps"})
  lu.assertEquals(m:state_dict_keys(), {"scale", "steps", "encoder.weight", "encoder.bias", "head.1.weight",
                          "head.1.bias"})
  lu.assertEquals(#m:parameters(), 5)
  lu.assertEquals(m:num_parameters(), 3 + 9 + 3 + 6 + 2)
  lu.assertEquals(#m:modules(), 5)            -- Net, Linear, Sequential, Tanh, Linear
  lu.assertEquals(m.note, "not a parameter")
  lu.assertTrue(glimpse.is_tensor(m.cache))
end

function T.test_sequential_names_children_from_zero_and_indexes_from_one()
  local seq = nn.Sequential{nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)}
  lu.assertEquals(names_of(seq, "named_parameters"), {"0.weight", "0.bias", "2.weight", "2.bias"})
  lu.assertEquals(#seq, 3)
  lu.assertEquals(seq[1].out_features, 3)      -- seq[1] is the child named "0"
  lu.assertEquals(seq[3].in_features, 3)
  lu.assertNil(seq[4])
  local kinds = {}
  for i, m in ipairs(seq) do kinds[i] = m.__name end
  lu.assertEquals(kinds, {"Linear", "ReLU", "Linear"})
  seq:add(nn.Sigmoid())
  lu.assertEquals(names_of(seq, "named_children"), {"0", "1", "2", "3"})
  lu.assertEquals(seq(glimpse.zeros(5, 2)).shape, {5, 1})
end

function T.test_non_leaf_tensor_fields_are_not_parameters()
  local m = nn.Linear(2, 2)
  m.last_output = m(glimpse.ones(1, 2))        -- requires grad but is an op's output
  lu.assertEquals(#m:parameters(), 2)
end

function T.test_assigning_a_plain_tensor_to_a_parameter_is_an_error_and_nil_removes_it()
  local m = nn.Linear(2, 2)
  lu.assertErrorMsgContains("cannot assign", function() m.weight = glimpse.zeros(2, 2) end)
  m.bias = nil
  lu.assertEquals(names_of(m, "named_parameters"), {"weight"})
  lu.assertEquals(m(glimpse.ones(1, 2)).shape, {1, 2})
end

function T.test_shared_parameter_is_listed_once()
  local a = nn.Linear(2, 2)
  local seq = nn.Sequential{a, nn.ReLU(), a}
  lu.assertEquals(#seq:parameters(), 2)
end

function T.test_subclass_of_a_layer_inherits_and_can_call_the_parent_init()
  local Scaled = nn.Linear:extend("Scaled")
  function Scaled:init(din, dout, s)
    nn.Linear.init(self, din, dout)
    self.s = s
  end
  function Scaled:forward(x) return nn.Linear.forward(self, x) * self.s end
  local m = Scaled(3, 2, 10)
  lu.assertTrue(m:is_a(nn.Linear))
  lu.assertTrue(m:is_a(nn.Module))
  lu.assertFalse(m:is_a(nn.Conv2d))
  local x = glimpse.randn(4, 3)
  assert_close(m(x), glimpse.linear(x, m.weight, m.bias) * 10, 1e-6, "forward")
  lu.assertStrContains(tostring(m), "Scaled(in_features=3")
end

function T.test_tostring_prints_the_tree_like_pytorch()
  local s = tostring(nn.Sequential{nn.Conv2d(1, 16, 3, {padding = 1}), nn.ReLU(),
                                   nn.MaxPool2d(2), nn.Linear(4, 2, {bias = false})})
  lu.assertEquals(s, table.concat({
    "Sequential(",
    "  (0): Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
    "  (1): ReLU()",
    "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0)",
    "  (3): Linear(in_features=4, out_features=2, bias=false)",
    ")"}, "\n"))
end

function T.test_apply_visits_children_first_then_the_module()
  local seq = nn.Sequential{nn.Linear(2, 2), nn.Sequential{nn.ReLU()}}
  local seen = {}
  seq:apply(function(m) seen[#seen + 1] = m.__name end)
  lu.assertEquals(seen, {"Linear", "ReLU", "Sequential", "Sequential"})
  seq:apply(function(m) if m:is_a(nn.Linear) then init.constant_(m.weight, 0.5) end end)
  lu.assertEquals(seq[1].weight:totable(), {{0.5, 0.5}, {0.5, 0.5}})
end

function T.test_zero_grad_zeroes_every_parameter_gradient()
  local m = Net(3)
  m(glimpse.randn(2, 3)):sum():backward()
  lu.assertTrue(max_abs(m.encoder.weight.grad) > 0)
  m:zero_grad()
  for _, p in ipairs(m:parameters()) do lu.assertEquals(max_abs(p.grad), 0) end
  m:zero_grad({set_to_none = true})
  lu.assertNil(m.scale.grad)
end

-- ---------------------------------------------------------------------------------------
-- state_dict

function T.test_state_dict_round_trip_through_a_file_restores_outputs()
  glimpse.manual_seed(1)
  local a = small_cnn()
  local x = glimpse.randn(2, 1, 6, 6)
  a(x)                                          -- one training step moves running stats
  a:evaluate()
  local ya = a(x)
  local path = tmpfile(".safetensors")
  glimpse.save(path, a:state_dict())
  glimpse.manual_seed(2)
  local b = small_cnn():evaluate()
  lu.assertTrue(max_abs(b(x) - ya) > 1e-3)
  b:load_state_dict(glimpse.load(path))
  os.remove(path)
  assert_close(b(x), ya, 0, "outputs after loading")
  lu.assertEquals(b[2].num_batches_tracked:item(), 1)
end

function T.test_state_dict_shares_storage_and_is_detached()
  local m = nn.Linear(2, 2)
  local sd = m:state_dict()
  lu.assertFalse(sd.weight.requires_grad_flag)
  glimpse.no_grad(function() m.weight:fill_(3) end)
  lu.assertEquals(sd.weight:totable(), {{3, 3}, {3, 3}})
end

function T.test_load_state_dict_reports_missing_unexpected_and_mismatched_entries()
  local m = nn.Sequential{nn.Linear(2, 3), nn.Linear(3, 1)}
  local sd = m:state_dict()
  local before = m[1].weight:clone()
  sd["1.bias"] = nil
  sd["extra"] = glimpse.zeros(1)
  sd["0.weight"] = glimpse.zeros(2, 3)
  sd["0.bias"] = glimpse.ones(3) * 7
  local ok, err = pcall(m.load_state_dict, m, sd)
  lu.assertFalse(ok)
  lu.assertStrContains(err, "missing keys: 1.bias")
  lu.assertStrContains(err, "unexpected keys: extra")
  lu.assertStrContains(err, "size mismatch for 0.weight: the checkpoint has shape [2,3], " ..
                            "the model has [3,2]")
  -- nothing was copied
  assert_close(m[1].weight, before, 0, "weight after a failed load")
  lu.assertTrue(max_abs(m[1].bias - 7) > 0)
end

function T.test_load_state_dict_not_strict_ignores_missing_and_unexpected_only()
  local m = nn.Sequential{nn.Linear(2, 3), nn.Linear(3, 1)}
  local res = m:load_state_dict({["0.bias"] = glimpse.ones(3), junk = glimpse.zeros(1)},
                                {strict = false})
  lu.assertEquals(m[1].bias:totable(), {1, 1, 1})
  lu.assertEquals(res.unexpected_keys, {"junk"})
  lu.assertEquals(res.missing_keys, {"0.weight", "1.weight", "1.bias"})
  lu.assertErrorMsgContains("size mismatch", m.load_state_dict, m, {["0.bias"] = glimpse.ones(4)},
                            {strict = false})
  lu.assertErrorMsgContains("not a tensor", m.load_state_dict, m, {["0.bias"] = 3}, {strict = false})
end

function T.test_pytorch_sequential_state_dict_loads_and_gives_pytorch_outputs()
  local f = glimpse.load("tests/fixtures/nn_sequential.safetensors")
  local sd = {}
  for k, v in pairs(f) do
    local name = k:match("^model%.(.*)")
    if name then sd[name] = v end
  end
  local m = small_cnn()
  m:load_state_dict(sd)
  m:evaluate()
  assert_close(m(f["input.x"]), f["output.y"], PYTORCH_RTOL, "eval output")
  lu.assertEquals(m[2].num_batches_tracked:item(), 3)
end

-- ---------------------------------------------------------------------------------------
-- train / eval

function T.test_train_and_evaluate_set_the_mode_recursively()
  local m = Net(2)
  m:evaluate()
  for _, sub in ipairs(m:modules()) do lu.assertFalse(sub.training) end
  m:train()
  for _, sub in ipairs(m:modules()) do lu.assertTrue(sub.training) end
  lu.assertIs(m:eval(), m)
end

function T.test_dropout_zeroes_in_training_and_is_the_identity_in_evaluation()
  glimpse.manual_seed(3)
  local d = nn.Dropout(0.5)
  local x = glimpse.ones(1000)
  local y = d(x)
  local zeros = (y:eq(0)):sum():item()
  lu.assertTrue(zeros > 400 and zeros < 600, "about half zeroed, got " .. zeros)
  lu.assertEquals(y:max():item(), 2)           -- survivors scaled by 1/(1-p)
  d:evaluate()
  lu.assertEquals(max_abs(d(x) - x), 0)
end

function T.test_batchnorm_training_updates_running_stats_and_evaluation_uses_them()
  glimpse.manual_seed(4)
  local bn = nn.BatchNorm2d(2, {momentum = 0.5})
  local x = glimpse.randn(8, 2, 4, 4) * 2 + 3
  local y = bn(x)
  -- training output: per-channel zero mean
  lu.assertTrue(max_abs(y:permute(2, 1, 3, 4):reshape(2, -1):mean(2)) < 1e-5)
  local mean = x:permute(2, 1, 3, 4):reshape(2, -1):mean(2)
  local var = x:permute(2, 1, 3, 4):reshape(2, -1):var(2, false, true)
  assert_close(bn.running_mean, mean * 0.5, 1e-5, "running mean")
  assert_close(bn.running_var, var * 0.5 + 0.5, 1e-5, "running var (unbiased)")
  lu.assertEquals(bn.num_batches_tracked:item(), 1)
  bn:evaluate()
  local ye = bn(x)
  local expect = (x - bn.running_mean:reshape(1, 2, 1, 1)) / (bn.running_var:reshape(1, 2, 1, 1) + 1e-5):sqrt()
  assert_close(ye, expect, 1e-5, "eval output")
  lu.assertEquals(bn.num_batches_tracked:item(), 1)
end

function T.test_batchnorm_without_momentum_keeps_a_cumulative_average()
  local bn = nn.BatchNorm2d(1, {momentum = false, affine = false})
  bn(glimpse.full({2, 1, 1, 2}, 2) + glimpse.tensor({0, 1}))   -- mean 2.5
  bn(glimpse.full({2, 1, 1, 2}, 4) + glimpse.tensor({0, 1}))   -- mean 4.5
  assert_close(bn.running_mean, glimpse.tensor({3.5}), 1e-6, "cumulative mean")
  lu.assertEquals(#bn:parameters(), 0)
end

-- ---------------------------------------------------------------------------------------
-- gradient checks through the layers

function T.test_layers_gradcheck()
  glimpse.manual_seed(5)
  local cases = {
    {nn.Linear(3, 2), glimpse.randn(4, 3)},
    {nn.Linear(3, 2, {bias = false}), glimpse.randn(2, 5, 3)},
    {nn.Conv2d(2, 3, {3, 2}, {stride = 2, padding = 1}), glimpse.randn(2, 2, 5, 4)},
    {nn.Conv2d(2, 2, 3), glimpse.randn(2, 4, 4)},                       -- unbatched (C,H,W)
    {nn.LayerNorm(4), glimpse.randn(3, 4)},
    {nn.LayerNorm({2, 3}), glimpse.randn(2, 2, 3)},
    {nn.BatchNorm2d(2), glimpse.randn(3, 2, 2, 2)},
    {nn.BatchNorm1d(3), glimpse.randn(4, 3)},
    {nn.Sequential{nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2), nn.Sigmoid()}, glimpse.randn(2, 3)},
    {nn.AvgPool2d(2), glimpse.randn(1, 2, 4, 4)},
  }
  for k, c in ipairs(cases) do
    local m, x = c[1], c[2]:requires_grad()
    if m:is_a(nn.BatchNorm2d) or m:is_a(nn.BatchNorm1d) then
      m.track_running_stats = false              -- gradcheck runs forward many times
      m.running_mean, m.running_var = nil, nil
    end
    local inputs = {x}
    for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
    local ok, err = pcall(glimpse.gradcheck, function(a) return m(a) end, inputs)
    lu.assertTrue(ok, "case " .. k .. " (" .. m.__name .. "): " .. tostring(err))
  end
end

function T.test_small_cnn_gradcheck_end_to_end()
  glimpse.manual_seed(6)
  local m = nn.Sequential{nn.Conv2d(1, 2, 3, {padding = 1}), nn.ReLU(), nn.AvgPool2d(2),
                          nn.Flatten(), nn.Linear(2 * 2 * 2, 3)}
  local inputs = {glimpse.randn(2, 1, 4, 4):requires_grad()}
  for _, p in ipairs(m:parameters()) do inputs[#inputs + 1] = p end
  lu.assertTrue(glimpse.gradcheck(function(a)
    return glimpse.cross_entropy(m(a), glimpse.tensor({1, 3}))
  end, inputs))
end

function T.test_embedding_padding_row_is_zero_and_gets_no_gradient()
  glimpse.manual_seed(7)
  local e = nn.Embedding(5, 3, {padding_idx = 2})
  lu.assertEquals(e.weight[2]:totable(), {0, 0, 0})
  local y = e(glimpse.tensor({{1, 2}, {2, 5}}))
  lu.assertEquals(y.shape, {2, 2, 3})
  y:sum():backward()
  lu.assertEquals(e.weight.grad[2]:totable(), {0, 0, 0})
  lu.assertEquals(e.weight.grad[1]:totable(), {1, 1, 1})
  lu.assertEquals(nn.Embedding(5, 3, {padding_idx = -1}).padding_idx, 5)
  lu.assertErrorMsgContains("padding_idx", nn.Embedding, 5, 3, {padding_idx = 6})
end

function T.test_linear_and_conv_default_init_lies_within_one_over_sqrt_fan_in()
  glimpse.manual_seed(8)
  local lin = nn.Linear(400, 50)
  lu.assertTrue(max_abs(lin.weight) <= 1 / math.sqrt(400))
  lu.assertTrue(max_abs(lin.weight) > 0.9 / math.sqrt(400))
  local conv = nn.Conv2d(4, 8, 5)
  lu.assertTrue(max_abs(conv.weight) <= 1 / math.sqrt(100))
  lu.assertTrue(max_abs(conv.bias) <= 1 / math.sqrt(100))
end

function T.test_layer_constructors_check_their_arguments()
  lu.assertErrorMsgContains("in_features", nn.Linear, 0, 3)
  lu.assertErrorMsgContains("kernel_size", nn.Conv2d, 1, 2, {3})
  lu.assertErrorMsgContains("nn.Dropout: option 'p'", nn.Dropout, 1.5)
  lu.assertErrorMsgContains("4-D", function() nn.BatchNorm2d(2)(glimpse.zeros(2, 2)) end)
  lu.assertErrorMsgContains("normalized shape", function() nn.LayerNorm(3)(glimpse.zeros(2, 4)) end)
  lu.assertErrorMsgContains("entry 2", nn.Sequential, {nn.ReLU(), 5})
end

-- ---------------------------------------------------------------------------------------
-- initialisers

local function sample_std(t)
  return t:reshape(t:numel()):var(1, false, true):sqrt():item()
end

function T.test_xavier_and_kaiming_follow_their_formulas()
  glimpse.manual_seed(9)
  local w = glimpse.empty(100, STAT_SAMPLES // 100)     -- fan_in 200, fan_out 100
  init.xavier_uniform_(w)
  local a = math.sqrt(6 / 300)
  lu.assertTrue(max_abs(w) <= a and max_abs(w) > a * (1 - STAT_RTOL))
  init.xavier_normal_(w, 2)
  lu.assertAlmostEquals(sample_std(w), 2 * math.sqrt(2 / 300), 2 * math.sqrt(2 / 300) * STAT_RTOL)
  init.kaiming_normal_(w, {mode = "fan_out", nonlinearity = "relu"})
  lu.assertAlmostEquals(sample_std(w), math.sqrt(2 / 100), math.sqrt(2 / 100) * STAT_RTOL)
  init.kaiming_uniform_(w, math.sqrt(5))                -- nn.Linear's bound 1/sqrt(fan_in)
  lu.assertTrue(max_abs(w) <= 1 / math.sqrt(200) and max_abs(w) > (1 - STAT_RTOL) / math.sqrt(200))
  local c = glimpse.empty(8, 4, 3, 3)                   -- fans count the receptive field
  lu.assertEquals({init.calculate_fan_in_and_fan_out(c)}, {36, 72})
end

function T.test_orthogonal_gives_orthonormal_rows_or_columns()
  glimpse.manual_seed(10)
  for _, shape in ipairs({{5, 12}, {12, 5}, {6, 6}, {4, 2, 3}}) do
    local t = init.orthogonal_(glimpse.empty(table.unpack(shape)), 1)
    local rows = shape[1]
    local m = t:reshape(rows, -1)
    local gram = rows <= m:size(2) and m:matmul(m, false, true) or m:matmul(m, true, false)
    local n = gram:size(1)
    local eye = glimpse.zeros(n, n)
    for i = 1, n do eye[i][i] = 1 end
    lu.assertTrue(max_abs(gram - eye) < ORTHO_TOL,
                  "shape " .. table.concat(shape, "x") .. ": " .. max_abs(gram - eye))
  end
  local g = init.orthogonal_(glimpse.empty(3, 3), 2)
  assert_close(g:matmul(g, false, true), glimpse.tensor({{4, 0, 0}, {0, 4, 0}, {0, 0, 4}}),
               ORTHO_TOL, "gain 2")
end

function T.test_simple_initialisers_and_gains()
  local p = glimpse.empty(2, 2):requires_grad()     -- works on parameters
  lu.assertIs(init.zeros_(p), p)
  lu.assertEquals(p:totable(), {{0, 0}, {0, 0}})
  init.constant_(p, 1.5)
  lu.assertEquals(p:totable(), {{1.5, 1.5}, {1.5, 1.5}})
  init.ones_(p)
  lu.assertEquals(p:totable(), {{1, 1}, {1, 1}})
  init.uniform_(p, 2, 3)
  lu.assertTrue(p:min():item() >= 2 and p:max():item() < 3)
  lu.assertAlmostEquals(init.calculate_gain("tanh"), 5 / 3, 1e-12)
  lu.assertAlmostEquals(init.calculate_gain("relu"), math.sqrt(2), 1e-12)
  lu.assertAlmostEquals(init.calculate_gain("leaky_relu", 0.2), math.sqrt(2 / 1.04), 1e-12)
  lu.assertErrorMsgContains("fewer than 2 dims", init.xavier_uniform_, glimpse.empty(5))
  lu.assertErrorMsgContains("mode", init.kaiming_uniform_, glimpse.empty(2, 2), 0, "fan_sideways")
end

function T.test_each_nn_file_loads_first_and_gives_the_same_classes()
  -- run in a fresh process (this one has glimpse.nn loaded already): requiring one file of
  -- the glimpse.nn package first must give the classes glimpse.nn publishes, not a copy
  local exe = arg and arg[-1]
  if not exe then return end
  local files = {"module", "containers", "linear", "embedding", "conv", "pool", "activation",
                 "dropout", "norm", "rnn", "attention", "multihead", "pointer"}
  for _, f in ipairs(files) do
    local name = "glimpse.nn." .. f
    lu.assertNotNil(package.searchpath(name, package.path), name)
    local code = string.format("local s = require %q; local n = glimpse.nn; local ok, k = true, 0; " ..
                               "for name, v in pairs(s) do if n[name] ~= nil then k = k + 1; " ..
                               "ok = ok and n[name] == v end end; " ..
                               "print(ok and k > 0 and n.LSTM and n.Linear and 'same' or 'different')", name)
    local p = io.popen(string.format("%q -e %q 2>&1", exe, code))
    local out = p:read("a")
    p:close()
    lu.assertStrContains(out, "same", name .. ": " .. out)
  end
  -- the old flat files are gone, and nothing in glimpse.nn walks the stack
  lu.assertNil(package.searchpath("glimpse.nn_rnn", package.path))
  lu.assertNil(package.searchpath("glimpse.nn_attention", package.path))
  lu.assertIs(require("glimpse.nn.rnn").LSTM, nn.LSTM)
end

function T.test_linear_init_false_keeps_shapes_and_loads_weights()
  local src = nn.Linear(5, 3)
  local l = nn.Linear(5, 3, {init = false})
  lu.assertEquals(l.weight.shape, {3, 5})
  lu.assertEquals(l.bias.shape, {3})
  l:load_state_dict(src:state_dict())
  local x = glimpse.randn(2, 5)
  lu.assertEquals(l(x):totable(), src(x):totable())
end

function T.test_adaptive_avg_pool_is_an_nn_layer()
  local x = glimpse.arange(16):reshape(1, 1, 4, 4)
  local y = nn.AdaptiveAvgPool2d(2)(x)
  lu.assertEquals(y:totable(), {{{{3.5, 5.5}, {11.5, 13.5}}}})
  lu.assertEquals(nn.AdaptiveAvgPool2d({1, 3})(x).shape, {1, 1, 1, 3})
end

function T.test_glimpse_init_is_the_initialiser_table()
  lu.assertIs(glimpse.init, require "glimpse.nn.weight_init")
end

function T.test_relu_inplace_overwrites_its_input_only_without_a_tape()
  local relu = nn.ReLU{inplace = true}
  lu.assertStrContains(tostring(relu), "inplace=true")
  local x = glimpse.tensor({-1, 0.5, -2})
  local y = glimpse.no_grad(function() return relu(x) end)
  lu.assertTrue(rawequal(x, y))
  lu.assertEquals(x:totable(), {0, 0.5, 0})
  -- with the tape on: a fresh tensor, the input untouched, the gradient as nn.ReLU's
  local a = glimpse.tensor({-1, 0.5, 2}):requires_grad()
  local b = nn.ReLU(true)(a * 1)
  b:sum():backward()
  lu.assertEquals(a.grad:totable(), {0, 1, 1})
  lu.assertFalse(nn.ReLU().inplace)
  lu.assertErrorMsgContains("nn.ReLU: the option", nn.ReLU, 3)
end

return T
