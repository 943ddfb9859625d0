-- tests/test_ntm_model.lua -- glimpse.models.NTM (bindings/glimpse/models/ntm.lua), the NTM
-- and its LSTM baseline (model = "lstm"), and glimpse.models.eval.copy: training on a tiny
-- copy task, decode shapes and traces, save/load, named configuration errors.
local lu = require "luaunit"
local glimpse = require "glimpse"
local models = require "glimpse.models"
local copy = require "datasets.copy_task"

local NTM = models.NTM
local T = {}

local TRAIN_STEPS = 40          -- Adam steps on one batch ...
local TRAIN_RATIO = 0.75        -- ... after which the loss is below this share of the first

local function tiny(o)
  local opts = {bits = 4, memory = 8, width = 6, hidden = 24}
  for k, v in pairs(o or {}) do opts[k] = v end
  glimpse.manual_seed(2)
  return NTM(opts)
end

local function batch(n)
  return copy.batch(n or 6, {min_len = 1, max_len = 4, bits = 4, seed = 4})
end

function T.test_loss_decreases_for_the_ntm_and_the_lstm_baseline()
  for _, kind in ipairs({"ntm", "lstm"}) do
    local m = tiny{model = kind, layers = 2}
    local b = batch()
    local opt = glimpse.optim.Adam(m:parameters(), {lr = 0.01})
    local first, last, stats
    for i = 1, TRAIN_STEPS do
      opt:zero_grad()
      local loss
      loss, stats = m:loss(b)
      loss:backward()
      opt:step()
      if i == 1 then first = loss:item() end
      last = loss:item()
    end
    lu.assertTrue(last < TRAIN_RATIO * first, string.format("%s: loss %g -> %g", kind, first, last))
    lu.assertTrue(stats.bit_accuracy > 0.5 and stats.bit_accuracy <= 1)
    lu.assertTrue(stats.bit_errors >= 0)
  end
end

function T.test_decode_gives_the_copied_bits_and_the_head_weightings()
  local m = tiny()
  local b = batch(5)
  local outs, ex = m:decode(b)
  lu.assertEquals(#outs, 5)
  for i = 1, 5 do
    lu.assertEquals(#outs[i], b.lengths[i])
    for _, v in ipairs(outs[i]) do
      lu.assertEquals(#v, 4)
      for _, bit in ipairs(v) do lu.assertTrue(bit == 0 or bit == 1) end
    end
  end
  lu.assertEquals(#ex.write, b.inputs.shape[2])
  lu.assertEquals(ex.read[1].shape, {5, 8})
  lu.assertAlmostEquals(ex.write[1]:sum(2)[1]:item(), 1, 1e-4)   -- a weighting sums to 1
  local r = models.eval.copy(m, b)
  lu.assertEquals(r.n, 5)
  local s = 0
  for _, e in ipairs(ex.errors) do s = s + e end
  lu.assertAlmostEquals(r.bit_errors, s / 5, 1e-9)
  local _, lx = tiny{model = "lstm", layers = 1}:decode(b)
  lu.assertNil(lx.write)
end

function T.test_copy_measure_over_a_dataset_matches_one_batch()
  local ds = copy.make{count = 7, min_len = 1, max_len = 3, bits = 4, seed = 6}
  local m = tiny()
  local whole = models.eval.copy(m, ds:collate({1, 2, 3, 4, 5, 6, 7}))
  local split = models.eval.copy(m, ds, {batch_size = 3})
  lu.assertEquals(split.n, 7)
  lu.assertTrue(math.abs(split.bit_errors - whole.bit_errors) < 1e-9)
end

function T.test_save_and_load_give_the_same_outputs()
  for _, kind in ipairs({"ntm", "lstm"}) do
    local m = tiny{model = kind, layers = 2}
    local b = batch()
    local path = os.tmpname()
    m:save(path)
    local m2 = NTM.load(path)
    os.remove(path)
    lu.assertEquals(m2.config, m.config)
    m:evaluate()
    lu.assertEquals(m2:loss(b):item(), m:loss(b):item())
    lu.assertEquals(m2:decode(b), m:decode(b))
  end
end

function T.test_configuration_errors_name_the_option()
  lu.assertErrorMsgContains("NTM: unknown model 'gru'", NTM, {model = "gru"})
  lu.assertErrorMsgContains("NTM: option 'memory' must be a positive integer", NTM, {memory = 0})
  lu.assertErrorMsgContains("NTM: unknown option 'slots'", NTM, {slots = 8})
  lu.assertErrorMsgContains("NTM:decode: opts.beam must be 1", function() tiny():decode(batch(), {beam = 2}) end)
  lu.assertErrorMsgContains("NTM: inputs must be (B,S,5)", function() tiny()(glimpse.zeros(2, 3, 9)) end)
  lu.assertErrorMsgContains("NTM:loss: batch.targets must be", function()
    local b = batch()
    b.targets = glimpse.zeros(1, 1, 1)
    tiny():loss(b)
  end)
end

return T
