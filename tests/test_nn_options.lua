-- tests/test_nn_options.lua -- every constructor of the building blocks that takes an options
-- table declares it once (Class.options, a glimpse.options spec) and is held to it: a
-- misspelt option is an error that names the owner and the nearest real option, a value of
-- the wrong type is an error naming the option (booleans are booleans, not any truthy
-- value), the error points at the caller's line, and the spec's defaults are what the module
-- uses when the option is left out.  Also decode's entry points and the image encoders.
local lu = require "luaunit"
local glimpse = require "glimpse"

local nn = glimpse.nn
local decode = glimpse.decode
local models = glimpse.models
local Vocab = glimpse.data.Vocab

local T = {}

local THIS_FILE = "test_nn_options.lua"

-- the error of fn(...), or a test failure when it does not raise
local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

-- fn(...) raises an error containing every string of `wants`
local function raises(wants, fn, ...)
  local err = error_of(fn, ...)
  for _, w in ipairs(wants) do lu.assertStrContains(err, w) end
  return err
end

-- Each case: owner (the name in messages), spec (the declared options), make(opts) (the
-- constructor with small positional arguments), a misspelt option and the name it should
-- suggest, a wrong-typed option, and defaults(m) -> {option = what m uses} for the options
-- the module keeps as a field.
local CASES = {
  {owner = "nn.Linear", spec = nn.Linear.options,
   make = function(o) return nn.Linear(3, 4, o) end,
   typo = {biass = false}, near = "bias", bad = {bias = "no"},
   defaults = function(m) return {bias = m.bias ~= nil} end},
  {owner = "nn.Embedding", spec = nn.Embedding.options,
   make = function(o) return nn.Embedding(5, 3, o) end,
   typo = {padding_ix = 1}, near = "padding_idx", bad = {padding_idx = "1"},
   defaults = function(m) return {padding_idx = m.padding_idx} end},
  {owner = "nn.Conv2d", spec = nn.Conv2d.options,
   make = function(o) return nn.Conv2d(1, 2, 3, o) end,
   typo = {strid = 2}, near = "stride", bad = {bias = "yes"},
   defaults = function(m)
     return {stride = m.stride[1], padding = m.padding[1], bias = m.bias ~= nil}
   end},
  {owner = "nn.MaxPool2d", spec = nn.MaxPool2d.options,
   make = function(o) return nn.MaxPool2d(2, o or {}) end,
   typo = {paddin = 1}, near = "padding", bad = {padding = "1"},
   defaults = function(m) return {padding = m.padding[1]} end},
  {owner = "nn.AvgPool2d", spec = nn.AvgPool2d.options,
   make = function(o) return nn.AvgPool2d(2, o or {}) end,
   typo = {strides = 1}, near = "stride", bad = {stride = "1"},
   defaults = function(m) return {padding = m.padding[1]} end},
  {owner = "nn.ReLU", spec = nn.ReLU.options,
   make = function(o) return nn.ReLU(o) end,
   typo = {inplce = true}, near = "inplace", bad = {inplace = 1},
   defaults = function(m) return {inplace = m.inplace} end},
  {owner = "nn.Dropout", spec = nn.Dropout.options,
   make = function(o) return nn.Dropout(o or {}) end,
   typo = {pp = 0.1}, near = "p", bad = {p = "0.1"},
   defaults = function(m) return {p = m.p} end},
  {owner = "nn.LayerNorm", spec = nn.LayerNorm.options,
   make = function(o) return nn.LayerNorm(4, o) end,
   typo = {epss = 1e-3}, near = "eps", bad = {elementwise_affine = 1},
   defaults = function(m) return {eps = m.eps, elementwise_affine = m.weight ~= nil} end},
  {owner = "nn.BatchNorm2d", spec = nn.BatchNorm2d.options,
   make = function(o) return nn.BatchNorm2d(3, o) end,
   typo = {momentun = 0.2}, near = "momentum", bad = {affine = "no"},
   defaults = function(m)
     return {momentum = m.momentum, eps = m.eps, affine = m.weight ~= nil,
             track_running_stats = m.track_running_stats}
   end},
  {owner = "nn.BatchNorm1d", spec = nn.BatchNorm1d.options,
   make = function(o) return nn.BatchNorm1d(3, o) end,
   typo = {track_running_stat = false}, near = "track_running_stats",
   bad = {track_running_stats = 0},
   defaults = function(m) return {momentum = m.momentum, eps = m.eps} end},
  {owner = "nn.LSTMCell", spec = nn.LSTMCell.options,
   make = function(o) return nn.LSTMCell(3, 4, o) end,
   typo = {biass = false}, near = "bias", bad = {bias = 0},
   defaults = function(m) return {bias = m.use_bias} end},
  {owner = "nn.GRUCell", spec = nn.GRUCell.options,
   make = function(o) return nn.GRUCell(3, 4, o) end,
   typo = {Bias = false}, near = "bias", bad = {bias = "false"},
   defaults = function(m) return {bias = m.use_bias} end},
  {owner = "nn.RNNCell", spec = nn.RNNCell.options,
   make = function(o) return nn.RNNCell(3, 4, o) end,
   typo = {nonlinearty = "relu"}, near = "nonlinearity", bad = {nonlinearity = "sigmoid"},
   defaults = function(m) return {bias = m.use_bias, nonlinearity = m.nonlinearity} end},
  {owner = "nn.LSTM", spec = nn.LSTM.options,
   make = function(o) return nn.LSTM(3, 4, o) end,
   typo = {bidirectonal = true}, near = "bidirectional", bad = {bidirectional = "yes"},
   defaults = function(m)
     return {layers = m.num_layers, bidirectional = m.bidirectional, dropout = m.dropout,
             bias = m.use_bias}
   end},
  {owner = "nn.GRU", spec = nn.GRU.options,
   make = function(o) return nn.GRU(3, 4, o) end,
   typo = {layer = 2}, near = "layers", bad = {layers = 1.5},
   defaults = function(m) return {layers = m.num_layers, dropout = m.dropout} end},
  {owner = "nn.RNN", spec = nn.RNN.options,
   make = function(o) return nn.RNN(3, 4, o) end,
   typo = {dropuot = 0.1}, near = "dropout", bad = {dropout = "0.1"},
   defaults = function(m)
     return {layers = m.num_layers, nonlinearity = m.nonlinearity, bias = m.use_bias}
   end},
  {owner = "nn.MultiheadAttention", spec = nn.MultiheadAttention.options,
   make = function(o) return nn.MultiheadAttention(8, 2, o) end,
   typo = {dropuot = 0.1}, near = "dropout", bad = {causal = "no"},
   defaults = function(m)
     return {causal = m.causal, dropout = m.dropout, bias = m.in_proj_bias ~= nil}
   end},
  {owner = "nn.TransformerEncoderLayer", spec = nn.TransformerEncoderLayer.options,
   make = function(o) return nn.TransformerEncoderLayer(8, 2, o) end,
   typo = {dim_feedforwad = 16}, near = "dim_feedforward", bad = {norm_first = "no"},
   defaults = function(m)
     return {dim_feedforward = m.dim_feedforward, dropout = m.dropout_p,
             activation = m.activation, norm_first = m.norm_first,
             layer_norm_eps = m.layer_norm_eps}
   end},
  {owner = "nn.TransformerDecoderLayer", spec = nn.TransformerDecoderLayer.options,
   make = function(o) return nn.TransformerDecoderLayer(8, 2, o) end,
   typo = {layer_norm_esp = 1e-6}, near = "layer_norm_eps", bad = {activation = "tanh"},
   defaults = function(m)
     return {dim_feedforward = m.dim_feedforward, dropout = m.dropout_p,
             norm_first = m.norm_first}
   end},
  {owner = "nn.PositionalEncoding", spec = nn.PositionalEncoding.options,
   make = function(o) return nn.PositionalEncoding(8, o) end,
   typo = {max_lenn = 4}, near = "max_len", bad = {learned = 1},
   defaults = function(m)
     return {max_len = m.max_len, learned = m.learned, dropout = m.dropout_p}
   end},
  {owner = "nn.Attention", spec = nn.Attention.options,
   make = function(o)
     local t = {query = 4}
     for k, v in pairs(o or {}) do t[k] = v end
     return nn.Attention(t)
   end,
   typo = {hiden = 8}, near = "hidden", bad = {coverage = "no"},
   defaults = function(m)
     return {score = m.score, mode = m.mode, window = m.window, temperature = m.temperature,
             normaliser = m.normaliser, soft_prob = m.soft_prob, hard_eval = m.hard_eval,
             region = m.region, estimator = m.estimator, tau = m.tau, coverage = m.use_coverage}
   end},
  {owner = "nn.Pointer", spec = nn.Pointer.options,
   make = function(o)
     local t = {query = 4}
     for k, v in pairs(o or {}) do t[k] = v end
     return nn.Pointer(t)
   end,
   typo = {logit_clp = 10}, near = "logit_clip", bad = {logit_clip = "big"},
   defaults = function(m) return {logit_clip = m.logit_clip} end},
  {owner = "models.SmallCNN", spec = models.SmallCNN.options,
   make = function(o) return models.SmallCNN(o) end,
   typo = {in_chanels = 1}, near = "in_channels", bad = {batch_norm = "yes"},
   defaults = function(m)
     return {in_channels = m.in_channels, channels = m.channels, kernel_size = m.kernel_size,
             batch_norm = m.batch_norm}
   end},
}

function T.test_every_case_is_a_declared_spec_named_after_its_constructor()
  for _, c in ipairs(CASES) do
    lu.assertEquals(type(c.spec), "table", c.owner)
    lu.assertEquals(c.spec.owner, c.owner)
    lu.assertEquals(type(c.spec:lines()), "table", c.owner)
    lu.assertStrContains(c.spec:lines()[1], c.owner .. " options:")
  end
end

function T.test_a_misspelt_option_names_the_nearest_real_one()
  for _, c in ipairs(CASES) do
    local typo = next(c.typo)
    raises({c.owner .. ": unknown option '" .. typo .. "'", "did you mean '" .. c.near .. "'"},
           c.make, c.typo)
  end
end

function T.test_a_wrong_type_is_an_error_naming_the_option()
  for _, c in ipairs(CASES) do
    local name = next(c.bad)
    local err = error_of(c.make, c.bad)
    -- "X: option 'n' must be ..." or, for a string outside the choices, "X: unknown n 'v'"
    lu.assertTrue((err:find(c.owner .. ": option '" .. name .. "' must be", 1, true) or
                   err:find(c.owner .. ": unknown " .. name .. " '", 1, true)) ~= nil, err)
  end
end

function T.test_the_spec_defaults_are_what_the_module_uses()
  for _, c in ipairs(CASES) do
    local m = c.make(nil)
    for name, used in pairs(c.defaults(m)) do
      local e = c.spec.by_name[name]
      lu.assertNotNil(e, c.owner .. ": no option " .. name)
      lu.assertEquals(used, e.default, c.owner .. "." .. name)
    end
  end
end

function T.test_the_issue_examples_fail_with_did_you_mean()
  raises({"nn.Attention: unknown option 'hiden'", "did you mean 'hidden'"},
         function() return nn.Attention{hiden = 8} end)
  raises({"nn.LSTM: unknown option 'bidirectonal'", "did you mean 'bidirectional'"},
         nn.LSTM, 3, 4, {bidirectonal = true})
  raises({"nn.MultiheadAttention: unknown option 'dropuot'", "did you mean 'dropout'"},
         nn.MultiheadAttention, 8, 2, {dropuot = 0.1})
  raises({"nn.Pointer: unknown option 'hiden'", "did you mean 'hidden'"},
         function() return nn.Pointer{hiden = 8} end)
end

function T.test_booleans_are_not_truthiness()
  raises({"option 'causal' must be a boolean"}, nn.MultiheadAttention, 8, 2, {causal = "no"})
  raises({"option 'coverage' must be a boolean"},
         function() return nn.Attention{query = 4, coverage = 1} end)
  raises({"option 'bidirectional' must be a boolean"}, nn.GRU, 3, 4, {bidirectional = 0})
  raises({"option 'need_weights' must be a boolean"}, function()
    nn.MultiheadAttention(4, 2)(glimpse.randn(1, 2, 4), nil, nil, nil, {need_weights = 0})
  end)
end

function T.test_errors_point_at_the_callers_line()
  local cases = {
    function() nn.Attention{hiden = 8} end,
    function() nn.LSTM(3, 4, {bidirectonal = true}) end,
    function() nn.LSTMCell(3, 4, {bias = 1}) end,
    function() nn.Conv2d(1, 2, 3, {stride = 0}) end,
    function() nn.TransformerEncoderLayer(8, 2, {dropout = 1}) end,
    function() nn.PositionalEncoding(8, {max_len = 0}) end,
    function() nn.Dropout(2) end,
    function() models.SmallCNN{kernel_size = 4} end,
  }
  for i, f in ipairs(cases) do
    lu.assertStrContains(error_of(f), THIS_FILE, "case " .. i)
  end
end

function T.test_forward_options_are_declared_and_checked()
  local x = glimpse.randn(1, 3, 8)
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  local dec = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16})
  local mha = nn.MultiheadAttention(8, 2)
  raises({"nn.TransformerEncoderLayer:forward: unknown option 'casual'",
          "did you mean 'causal'"}, function() enc(x, {casual = true}) end)
  raises({"nn.TransformerDecoderLayer:forward: unknown option 'tgt_masks'",
          "did you mean 'tgt_mask'"}, function() dec(x, x, {tgt_masks = {}}) end)
  raises({"nn.MultiheadAttention:forward: unknown option 'need_weight'",
          "did you mean 'need_weights'"}, function() mha(x, nil, nil, nil, {need_weight = true}) end)
  lu.assertEquals(nn.TransformerEncoderLayer.forward_options.by_name.causal.default, false)
  lu.assertEquals(nn.MultiheadAttention.forward_options.by_name.need_weights.default, true)
  local _, w = mha(x)                                   -- need_weights defaults to true
  lu.assertNotNil(w)
end

-- ---------------------------------------------------------------------------------------
-- decode and the image encoders

-- a step over V = 5 tokens that always prefers token 4, then the end token at step 3
local function toy_step(tokens, state, t)
  local N = tokens:numel()
  local rows = {}
  for r = 1, N do rows[r] = t < 3 and {-9, -9, -9, -0.1, -9} or {-9, -9, -0.1, -9, -9} end
  return glimpse.tensor(rows), state
end

function T.test_decode_refuses_unknown_options_with_did_you_mean()
  local st = {h = glimpse.zeros(2, 1)}
  raises({"decode.beam: unknown option 'beem'", "did you mean 'beam'"},
         decode.beam, toy_step, st, {beem = 3})
  raises({"decode.greedy: unknown option 'max_lne'", "did you mean 'max_len'"},
         decode.greedy, toy_step, st, {max_lne = 3})
  raises({"decode.sample: unknown option 'top_kk'", "did you mean 'top_k'"},
         decode.sample, toy_step, st, {top_kk = 3})
  raises({"decode.reorder: unknown option 'row'", "did you mean 'rows'"},
         decode.reorder, st, {1, 2}, {row = 2})
  raises({"decode.greedy: option 'logits' must be a boolean"}, decode.greedy, toy_step, st,
         {logits = 1})
  raises({"decode.beam: option 'length_penalty' must be a number"}, decode.beam, toy_step, st,
         {length_penalty = "big"})
  -- a beam option means nothing to greedy decoding
  raises({"decode.greedy: unknown option 'beam'"}, decode.greedy, toy_step, st, {beam = 2})
  lu.assertStrContains(error_of(function() decode.beam(toy_step, st, {beem = 3}) end), THIS_FILE)
end

function T.test_decode_defaults_are_what_it_uses()
  local o = decode.options
  lu.assertEquals(o.greedy.by_name.start.default, Vocab.START)
  lu.assertEquals(o.greedy.by_name.stop.default, Vocab.END)
  lu.assertEquals(o.beam.by_name.start.default, Vocab.START)
  lu.assertEquals(o.beam.by_name.beam.default, 5)
  lu.assertEquals(o.sample.by_name.temperature.default, 1)
  local st = {h = glimpse.zeros(2, 1)}
  -- start 2 is fed at t = 1, stop 3 ends the rows, integral floats count as integers
  local seen
  local function step(tokens, state, t)
    if t == 1 then seen = tokens:totable() end
    return toy_step(tokens, state, t)
  end
  local toks, _, _, fin = decode.greedy(step, st, {max_len = 10.0})
  lu.assertEquals(seen, {2, 2})
  lu.assertEquals(toks, {{4, 4}, {4, 4}})
  lu.assertEquals(fin, {true, true})
  local hyps = decode.beam(toy_step, st)
  lu.assertEquals(#hyps, 2)
  lu.assertEquals(hyps[1][1].tokens, {4, 4})
end

function T.test_encoder_builders_declare_their_options()
  raises({"models.vgg11: unknown option 'num_clases'", "did you mean 'num_classes'"},
         models.vgg11, {num_clases = 3})
  raises({"models.resnet18: unknown option 'zero_init_residul'",
          "did you mean 'zero_init_residual'"}, models.resnet18, {zero_init_residul = true})
  raises({"models.resnet18: option 'classifier' must be a boolean"}, models.resnet18,
         {classifier = 0})
  raises({"models.preprocess: unknown option 'normalise'", "did you mean 'normalize'"},
         models.preprocess, glimpse.rand(3, 8, 8), 8, {normalise = false})
  raises({"models.SmallCNN: unknown option 'chanels'", "did you mean 'channels'"},
         models.encoder, "small", {chanels = {4}})
  lu.assertIs(models.encoder_options.small, models.SmallCNN.options)
  lu.assertEquals(models.encoder_options.vgg16.by_name.num_classes.default, 1000)
  lu.assertEquals(models.encoder_options.resnet50.by_name.zero_init_residual.default, false)
  local names = models.names()
  for _, n in ipairs(names) do lu.assertNotNil(models.encoder_options[n], n) end
end

return T
