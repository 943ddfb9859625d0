-- tests/test_hostile.lua -- the hostile-call driver: every public function of glimpse (and
-- the tensor methods), glimpse.attention, the glimpse.nn constructors and their modules'
-- methods, glimpse.optim, glimpse.decode and glimpse.models is called with wrong types,
-- wrong shapes, nil and odd numbers.  A call may succeed; when it raises, the message must be
-- a string that names the function (or its class / module) and must not be one of Lua's
-- internal errors ("attempt to index a nil value", "bad argument #1 to '?'", ...), which
-- would mean an argument reached code that never checked it.
local lu = require "luaunit"
local glimpse = require "glimpse"

local T = {}

-- Lua's own runtime errors: an unchecked argument got this far
local INTERNAL = {"attempt to ", "to '?'", "stack overflow", "C stack overflow",
                  "table index is nil", "table index is NaN", "number has no integer representation",
                  "invalid value (at index", "wrong number of arguments to 'insert'"}

-- the hostile argument lists, made fresh for each call (calls may change them in place)
local function hostile_args()
  return {
    {},
    {nil},
    {"x"},
    {true},
    {{}},
    {function() end},
    {-1},
    {2.5},
    {0 / 0},
    {glimpse.rand(2, 3)},
    {glimpse.rand(2, 3), "x"},
    {glimpse.rand(2, 3), glimpse.rand(5)},
    {glimpse.rand(2, 3), nil, 3},
    {{1, {2}}},
    {2, "x"},
    {3, 4, "x"},
  }
end

-- functions not called here, and why
local SKIP = {
  ["glimpse.no_grad"] = "calls its argument",
  ["glimpse.set_num_threads"] = "changes the BLAS threads of later suites",
  ["glimpse.manual_seed"] = "any integer is a seed",
  ["glimpse.set_rng_state"] = "any integers are a state",
  ["glimpse.empty_cache"] = "takes no arguments",
  ["glimpse.Tensor.close"] = "closes the tensor under test",
  ["glimpse.Tensor.backward"] = "tested with a graph below",
  ["nn.TransformerEncoderLayer:activation_fn"] = "a function field x -> y, not a method",
}
-- the named full-size networks build hundreds of MB of weights from no arguments; the VGG
-- and ResNet constructors they call are probed
for _, n in ipairs{"vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn",
                   "vgg19_bn", "resnet18", "resnet34", "resnet50"} do
  SKIP["models." .. n] = "builds a full-size network"
end

local function restore_state(grad, rng1, rng2)
  glimpse.set_grad_enabled(grad)
  glimpse.set_rng_state(rng1, rng2)
end

-- check one call; record a complaint into bad
local function probe(bad, name, short, owners, fn, args, self_arg)
  local grad = glimpse.is_grad_enabled()
  local r1, r2 = glimpse.rng_state()
  local n = select("#", table.unpack(args))
  local ok, err
  if self_arg ~= nil then
    ok, err = pcall(fn, self_arg, table.unpack(args, 1, n))
  else
    ok, err = pcall(fn, table.unpack(args, 1, n))
  end
  restore_state(grad, r1, r2)
  if ok then return end
  local desc = {}
  for i = 1, n do
    local a = args[i]
    desc[i] = glimpse.is_tensor(a) and ("tensor{" .. table.concat(a.shape, ",") .. "}")
              or type(a) == "string" and string.format("%q", a) or tostring(a)
  end
  local call = string.format("%s(%s)", name, table.concat(desc, ", "))
  if type(err) ~= "string" then
    bad[#bad + 1] = call .. ": error is a " .. type(err) .. ", not a message"
    return
  end
  for _, pat in ipairs(INTERNAL) do
    if err:find(pat, 1, true) then
      bad[#bad + 1] = call .. ": internal error: " .. err
      return
    end
  end
  -- aliases (optim.RMSprop for RMSProp, clip_grad_norm_ for clip_grad_norm) match too
  -- the position prefix ("/path/attention.lua:12: ") names a file, not the function
  local low = err:gsub("^[^\n]-%.lua:%d+: ", ""):lower()
  local named = low:find((short:lower():gsub("_$", "")), 1, true)
  for _, o in ipairs(owners) do named = named or low:find(o:lower(), 1, true) end
  if not named then bad[#bad + 1] = call .. ": the message does not name " .. short .. ": " .. err end
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do if type(k) == "string" then ks[#ks + 1] = k end end
  table.sort(ks)
  return ks
end

local function is_callable(v)
  if type(v) == "function" then return true end
  local mt = type(v) == "table" and getmetatable(v)
  return mt and mt.__call ~= nil or false
end

-- every public function of a table (names starting with "_" are internal)
local function probe_table(bad, qual, tbl, owners)
  for _, k in ipairs(sorted_keys(tbl)) do
    local f = rawget(tbl, k)
    local name = qual .. "." .. k
    if k:sub(1, 1) ~= "_" and is_callable(f) and not SKIP[name] then
      for _, args in ipairs(hostile_args()) do probe(bad, name, k, owners, f, args) end
    end
  end
end

-- every method of an object, called on the object with hostile arguments
local function probe_methods(bad, qual, obj, owners, skip)
  local seen, names = {}, {}
  -- the object's own fields, then its class and the classes above it (a table __index, or
  -- nn's classes, whose metatable's __index is the parent class)
  local t, depth = obj, 0
  while type(t) == "table" and depth < 16 do
    for k, v in pairs(t) do
      if type(k) == "string" and type(v) == "function" and not seen[k] and not k:find("^__") then
        seen[k] = true
        names[#names + 1] = k
      end
    end
    local mt = getmetatable(t)
    t = mt and (type(mt.__index) == "table" and mt.__index or rawget(mt, "__parent") or
                (depth == 0 and mt)) or nil
    depth = depth + 1
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local name = qual .. ":" .. k
    if k:sub(1, 1) ~= "_" and not (skip and skip[k]) and not SKIP[name] then
      for _, args in ipairs(hostile_args()) do probe(bad, name, k, owners, obj[k], args, obj) end
    end
  end
end

local function report(bad)
  if #bad > 0 then
    lu.fail(#bad .. " hostile calls gave unclear errors:\n  " .. table.concat(bad, "\n  ", 1,
            math.min(#bad, tonumber(os.getenv("HOSTILE_SHOW") or 60))))
  end
end

function T.test_glimpse_functions_give_clear_errors()
  local bad = {}
  local lazy = {}
  for k in pairs(getmetatable(glimpse).__complete) do lazy[k] = true end
  local top = {}
  for k, v in pairs(glimpse) do if not lazy[k] and k ~= "Tensor" then top[k] = v end end
  probe_table(bad, "glimpse", top, {"glimpse"})
  report(bad)
end

function T.test_tensor_methods_give_clear_errors()
  local bad = {}
  probe_methods(bad, "glimpse.Tensor", glimpse.rand(2, 3), {"Tensor", "tensor"},
                {backward = true, close = true})
  report(bad)
end

function T.test_attention_functions_give_clear_errors()
  local bad = {}
  probe_table(bad, "attention", glimpse.attention, {"attention"})
  probe_table(bad, "attention.ntm", glimpse.attention.ntm, {"attention", "ntm"})
  report(bad)
end

function T.test_nn_constructors_give_clear_errors()
  local bad = {}
  probe_table(bad, "nn", glimpse.nn, {"nn."})
  report(bad)
end

function T.test_nn_module_methods_give_clear_errors()
  local nn = glimpse.nn
  local bad = {}
  local mods = {
    Linear = nn.Linear(2, 3), Embedding = nn.Embedding(4, 2), LSTM = nn.LSTM(2, 3),
    GRU = nn.GRU(2, 3), LSTMCell = nn.LSTMCell(2, 3), Conv2d = nn.Conv2d(1, 2, 3),
    LayerNorm = nn.LayerNorm(3), Sequential = nn.Sequential{nn.Linear(3, 3), nn.ReLU()},
    Attention = nn.Attention{score = "additive", query = 3, key = 3, hidden = 4},
    MultiheadAttention = nn.MultiheadAttention(4, 2),
    Pointer = nn.Pointer{query = 3, key = 3, hidden = 4},
    RNNCell = nn.RNNCell(2, 3), GRUCell = nn.GRUCell(2, 3), Dropout = nn.Dropout(0.5),
    MaxPool2d = nn.MaxPool2d(2), ReLU = nn.ReLU(), BatchNorm2d = nn.BatchNorm2d(3),
    TransformerEncoderLayer = nn.TransformerEncoderLayer(4, 2),
  }
  for _, k in ipairs(sorted_keys(mods)) do
    -- a container's errors come from its first child
    local owners = k == "Sequential" and {k, "nn.", "Linear"} or {k, "nn."}
    probe_methods(bad, "nn." .. k, mods[k], owners)
  end
  report(bad)
end

function T.test_optim_functions_give_clear_errors()
  local bad = {}
  probe_table(bad, "optim", glimpse.optim, {"optim"})
  local w = glimpse.randn(3):requires_grad()
  local opt = glimpse.optim.Adam({w}, {lr = 0.1})
  -- check and update are the class's hooks, which step calls with state it made
  probe_methods(bad, "optim.Adam", opt, {"Adam", "optim"}, {check = true, update = true})
  report(bad)
end

function T.test_decode_functions_give_clear_errors()
  local bad = {}
  probe_table(bad, "decode", glimpse.decode, {"decode"})
  report(bad)
end

function T.test_models_constructors_give_clear_errors()
  local bad = {}
  probe_table(bad, "models", glimpse.models, {"models", "Seq2Seq", "PointerNet", "NTM",
                                                "Captioner", "Transformer", "ResNet"})
  report(bad)
end

-- the cases the fuzz campaign reported, by name
function T.test_reported_hostile_calls_name_the_function()
  local function msg(f, ...)
    local ok, err = pcall(f, ...)
    lu.assertFalse(ok)
    lu.assertNotStrContains(err, "attempt to")
    return err
  end
  lu.assertStrContains(msg(glimpse.attention.scaled_dot, glimpse.rand(2, 3)), "scaled_dot")
  -- zero_grad(true) is PyTorch's zero_grad(set_to_none=True); other values are refused
  local lin = glimpse.nn.Linear(2, 3)
  lin(glimpse.rand(1, 2)):sum():backward()
  lin:zero_grad(true)
  lu.assertNil(lin.weight.grad)
  lu.assertStrContains(msg(function() lin:zero_grad(1) end), "zero_grad")
  lu.assertStrContains(msg(glimpse.models.ResNet, 3), "ResNet")
  local p = glimpse.nn.Pointer{query = 3, key = 3, hidden = 4}
  local err = msg(p, glimpse.rand(2, 3), glimpse.rand(2, 5, 4))
  lu.assertStrContains(err, "Pointer")
  lu.assertStrContains(err, "keys")
  -- calls the API fuzzer found reaching an internal Lua error
  local a, x = glimpse.attention, glimpse.rand(2, 3, 4)
  lu.assertStrContains(msg(a.conv_features, x, print), "conv_features: F1 must be a tensor")
  lu.assertStrContains(msg(a.multi_head, x, print), "multi_head: key must be a tensor")
  lu.assertStrContains(msg(a.multi_head, x, nil, nil, {heads = 2.5}), "integer heads")
  lu.assertStrContains(msg(a.reinforce_loss, glimpse.rand(2), glimpse.rand(2), print),
                       "reinforce_loss: opts must be a table")
  lu.assertStrContains(msg(a.scores, "additive", {}, {}, glimpse.rand(2, 3)), "scores: p.W")
  lu.assertStrContains(msg(a.local_prior, {}, 2, 5, 1), "local_prior: pos")
end

return T
