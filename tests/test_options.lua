-- tests/test_options.lua -- options are declared once (glimpse.options) and no public
-- constructor ignores one: every class of glimpse.nn, glimpse.models and glimpse.optim that
-- takes an options table carries its spec as Class.options, and a misspelt option is an
-- error naming the nearest real one.  The spec itself: checks, defaults, aliases, the `?`
-- listing and script flags.  (test_nn_options.lua and test_lab_options.lua go through each
-- layer's constructors option by option.)
local lu = require "luaunit"
local glimpse = require "glimpse"
local options = require "glimpse.options"

local T = {}

local nn, models, optim = glimpse.nn, glimpse.models, glimpse.optim

-- the classes that take no options table (positional arguments only, or abstract bases)
local NO_OPTIONS = {
  nn = {AdaptiveAvgPool2d = true, Flatten = true, Identity = true, Module = true,
        ModuleList = true, Sequential = true, Sigmoid = true, Tanh = true},
  models = {AdaptiveAvgPool2d = true, BasicBlock = true, Bottleneck = true, Encoder = true},
  optim = {Optimizer = true, Scheduler = true},
}

local function is_spec(v)
  return type(v) == "table" and getmetatable(v) == options.Spec
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

local function assert_did_you_mean(fn, owner, typo, near)
  local err = error_of(fn)
  lu.assertStrContains(err, owner .. ": unknown option '" .. typo .. "'")
  lu.assertStrContains(err, "did you mean '" .. near .. "'")
end

function T.test_every_public_class_that_takes_options_declares_them()
  local missing = {}
  for name, t in pairs({nn = nn, models = models, optim = optim}) do
    for k, v in pairs(t) do
      if type(k) == "string" and k:match("^%u") and type(v) == "table" and getmetatable(v)
         and not NO_OPTIONS[name][k] and k:upper() ~= k then
        if not is_spec(v.options) then missing[#missing + 1] = name .. "." .. k end
      end
    end
  end
  for _, c in ipairs({glimpse.train.Trainer, glimpse.progress.Bar, glimpse.report.Page}) do
    if not is_spec(c.options) then missing[#missing + 1] = tostring(c) end
  end
  table.sort(missing)
  lu.assertEquals(missing, {})
end

function T.test_the_issue_examples_fail_with_did_you_mean()
  local vocab = {"a", "b"}
  assert_did_you_mean(function() return models.Captioner{vocab = vocab, whole_imag = true} end,
                      "Captioner", "whole_imag", "whole_image")
  assert_did_you_mean(function() return nn.Attention{query = 4, hiden = 8} end,
                      "nn.Attention", "hiden", "hidden")
  assert_did_you_mean(function() return nn.LSTM(3, 4, {bidirectonal = true}) end,
                      "nn.LSTM", "bidirectonal", "bidirectional")
  assert_did_you_mean(function() return nn.MultiheadAttention(8, 2, {dropuot = 0.1}) end,
                      "nn.MultiheadAttention", "dropuot", "dropout")
  assert_did_you_mean(function() return nn.Pointer{query = 4, key = 4, hiden = 8} end,
                      "nn.Pointer", "hiden", "hidden")
end

function T.test_every_model_refuses_a_misspelt_option()
  local ds = glimpse.data.seq2seq.reversal{n = 4, max_len = 8, seed = 1}
  local cases = {
    {function(o) o.dataset = ds; return models.Seq2Seq(o) end, "Seq2Seq", "hiden", "hidden"},
    {function(o) o.dataset = ds; return models.Transformer(o) end, "Transformer", "head", "heads"},
    {function(o) return models.PointerNet(o) end, "PointerNet", "glimpse", "glimpses"},
    {function(o) return models.NTM(o) end, "NTM", "memroy", "memory"},
    {function(o) o.vocab = {"a"}; return models.Captioner(o) end, "Captioner", "dropot", "dropout"},
    {function(o) return glimpse.train.Trainer(o) end, "Trainer", "step", "steps"},
  }
  for _, c in ipairs(cases) do
    assert_did_you_mean(function() return c[1]({[c[3]] = 1}) end, c[2], c[3], c[4])
  end
  local p = glimpse.tensor({1, 2}):requires_grad()
  assert_did_you_mean(function() return optim.Adam({p}, {lr = 0.1, betas1 = 0.9}) end,
                      "Adam", "betas1", "betas")
end

function T.test_booleans_are_booleans()
  local ds = glimpse.data.seq2seq.reversal{n = 4, max_len = 8, seed = 1}
  local err = error_of(models.Transformer, {dataset = ds, norm_first = "no"})
  lu.assertStrContains(err, "Transformer: option 'norm_first' must be a boolean (true or false), got 'no'")
  err = error_of(nn.LSTM, 3, 4, {bidirectional = 1})
  lu.assertStrContains(err, "option 'bidirectional' must be a boolean")
end

function T.test_model_decode_refuses_unknown_options()
  local ds = glimpse.data.seq2seq.reversal{n = 4, max_len = 8, seed = 1}
  local m = models.Seq2Seq{dataset = ds, emb = 4, hidden = 8, attn_hidden = 4}
  local err = error_of(m.decode, m, ds:collate({1, 2}), {bema = 2})
  lu.assertStrContains(err, "Seq2Seq:decode: unknown option 'bema' (did you mean 'beam'?")
end

-- the spec on its own

local SPEC = options.declare("Thing", {
  {"size", "int", 4, range = {1}, help = "how big"},
  {"rate", "number", 0.5, range = {0, 1}, help = "a share"},
  {"kind", "string", "a", choices = {"a", "b"}, help = "which"},
  {"on", "boolean", true, help = "switched on"},
  {"vocab", "table", nil, required = true, help = "the words"},
  {"hidden", "int", nil, aliases = {"dim_hidden"}, help = "an old name kept"},
  {"clip", "number", 0, range = {0}, finite = true, help = "finite"},
})

function T.test_spec_check_fills_defaults_and_refuses_what_does_not_fit()
  local o = SPEC:check({vocab = {}}, 1)
  lu.assertEquals({o.size, o.rate, o.kind, o.on}, {4, 0.5, "a", true})
  lu.assertEquals(SPEC:check({vocab = {}, dim_hidden = 7}).hidden, 7)
  lu.assertStrContains(error_of(SPEC.check, SPEC, {}), "Thing: option 'vocab' is required")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, size = 0}),
                       "Thing: option 'size' must be a positive integer, got 0")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, size = 2.5}), "got 2.5")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, rate = 0 / 0}),
                       "option 'rate' must be a number in [0, 1]")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, kind = "c"}),
                       "Thing: unknown kind 'c' (one of a, b)")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, clip = math.huge}),
                       "a finite number >= 0")
  lu.assertStrContains(error_of(SPEC.check, SPEC, "x"), "Thing: expected an options table")
  lu.assertStrContains(error_of(SPEC.check, SPEC, {vocab = {}, sise = 3}),
                       "unknown option 'sise' (did you mean 'size'?")
end

function T.test_spec_lines_list_every_option()
  local text = table.concat(SPEC:lines(), "\n")
  for _, name in ipairs({"size", "rate", "kind", "on", "vocab", "hidden", "clip"}) do
    lu.assertStrContains(text, name)
  end
  lu.assertStrContains(text, "required")
  lu.assertStrContains(text, "a|b")
end

function T.test_spec_flags_round_trip_through_argparse()
  local parser = require("argparse")("t")
  SPEC:add_flags(parser, {"size", "rate", "kind", "on"})
  local args = parser:parse({"--size", "7", "--kind", "b", "--no-on"})
  local o = SPEC:from_args(args, {"size", "rate", "kind", "on"})
  lu.assertEquals(o, {size = 7, rate = 0.5, kind = "b", on = false})
  local ok = pcall(parser.parse, parser, {"--kind", "z"})
  lu.assertFalse(ok)
end

return T
