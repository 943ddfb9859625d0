-- tests/fuzz/api.lua -- the API fuzzer: calls glimpse's public functions, tensor methods,
-- nn modules and optimizers with random and hostile arguments, for a given time.
--
--   mkdir /tmp/w && cd /tmp/w && glimpse REPO/tests/fuzz/api.lua --corpus REPO/tests/corpus \
--       [--seconds 30] [--seed N] [--last FILE]
--
-- Run it in an empty directory (tests/fuzz/run.sh makes one; it refuses a folder with a
-- Makefile): every path it hands out is a relative name in that directory -- copies of a few
-- corpus files, names to write -- so whatever a fuzzed call writes lands there and nowhere
-- else.  It needs no LuaUnit: every call runs under pcall, and an error is the expected
-- outcome of most.  What it looks for is the process dying -- an ASan/UBSan report, a
-- crash, a hang -- which `make fuzz` reports with the call that did it (--last FILE holds
-- the call in progress).  At the end it prints how many calls ran and how many errors were
-- internal Lua errors ("attempt to index a nil value ...") rather than messages naming the
-- function, and which functions gave them.
local glimpse = require "glimpse"

local opts = {seconds = 30, seed = os.time(), last = nil, corpus = nil}
do
  local i = 1
  while arg and arg[i] do
    local k = arg[i]:match("^%-%-(.+)$")
    if k ~= "seconds" and k ~= "seed" and k ~= "last" and k ~= "corpus" then
      error("api.lua: unknown flag " .. arg[i], 0)
    end
    opts[k] = (k == "last" or k == "corpus") and arg[i + 1] or tonumber(arg[i + 1])
    i = i + 2
  end
end

local function file_exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

if file_exists("Makefile") or file_exists(".git") then
  error("api.lua: run it in an empty directory (fuzzed calls write files where they run)", 0)
end
if not opts.corpus then error("api.lua: --corpus DIR (tests/corpus) is required", 0) end

local CALL_SECONDS = 3          -- a Lua-side loop running longer than this is stopped
local MAX_ELEMS = 4096          -- tensors made here stay small; the hostile part is the rest

-- copies of corpus files, by their plain names, in this directory
local COPIES = {"image/seed_rgb.png", "image/bomb.jpg", "image/png_bad_crc.png",
                "image/seed.gif", "safetensors/seed.safetensors", "idx/seed_u8.idx"}
for i, rel in ipairs(COPIES) do
  local f = assert(io.open(opts.corpus .. "/" .. rel, "rb"))
  local bytes = f:read("a")
  f:close()
  COPIES[i] = rel:match("[^/]+$")
  f = assert(io.open(COPIES[i], "wb"))
  f:write(bytes)
  f:close()
end
os.execute("mkdir -p sub")

math.randomseed(opts.seed)
local R = math.random

local function pick(list) return list[R(#list)] end

-- ---------------------------------------------------------------------------------------
-- values

local INTS = {0, 1, 2, 3, 4, -1, -2, 5, 7, 16, 64, 2147483647, 2147483648, -2147483648,
              4294967297, math.maxinteger, math.mininteger, 1000000000}
local FLOATS = {0.5, -0.5, 0.0, -0.0, 1e-45, 1e308, -1e308, 0 / 0, math.huge, -math.huge,
                1e7, 3.5, 2 ^ 53}
local STRINGS = {"", "x", "mean", "sum", "none", "soft", "hard", "additive", "dot",
                 "scaled_dot", "general", "concat", "cosine", "bilinear", "nearest", "jet",
                 "png", "\0", string.rep("a", 5000), "%s%n", "out", "out.png", "out.jpg",
                 "out.safetensors", "sub/", "sub", "missing/x", table.unpack(COPIES)}
local KEYS = {"reduction", "dim", "keepdim", "channels", "max_pixels", "beam", "max_len",
              "mask", "ignore_index", "label_smoothing", "padding", "stride", "dilation",
              "groups", "bias", "eps", "momentum", "lr", "weight_decay", "heads", "causal",
              "score", "mode", "query", "key", "hidden", "scale", "alpha", "colormap",
              "filter", "quality", "format", "first", "limit", "item_shape", "layers",
              "bidirectional", "dropout", "p", "training", "value", "bos", "eos", "length_norm",
              "temperature", "ncol", "pad_value", "upsample", "window", "sigma", "beta"}

local gen

local function small_shape()
  local nd = R(0, 4)
  local shape, n = {}, 1
  for d = 1, nd do
    local s = pick({0, 1, 1, 2, 2, 3, 4, 5, 7})
    if n * math.max(s, 1) > MAX_ELEMS then s = 1 end
    shape[d] = s
    n = n * math.max(s, 1)
  end
  return shape
end

local function tensor()
  local shape = small_shape()
  local ok, t = pcall(function()
    if #shape == 0 then return glimpse.tensor(R() * 4 - 2) end
    local k = R(5)
    if k == 1 then return glimpse.zeros(table.unpack(shape)) end
    if k == 2 then return glimpse.rand(table.unpack(shape)) end
    if k == 3 then   -- integer-valued: ids, targets, masks
      return glimpse.rand(table.unpack(shape)):mul(6):floor()
    end
    local t = glimpse.randn(table.unpack(shape))
    if R(4) == 1 then t:fill_(pick(FLOATS)) end
    return t
  end)
  if not ok then return glimpse.zeros(1) end
  local r = R(10)
  if r == 1 then t:requires_grad(true)
  elseif r == 2 then t:close() end        -- a closed tensor
  return t
end

local function list(depth)
  local out = {}
  for i = 1, R(0, 5) do out[i] = R(3) == 1 and gen(depth + 1) or pick(INTS) end
  return out
end

local function options(depth)
  local o = {}
  for _ = 1, R(1, 4) do o[pick(KEYS)] = gen(depth + 1) end
  return o
end

-- a random value; depth bounds nesting
gen = function(depth)
  depth = depth or 0
  local k = R(depth > 2 and 6 or 10)
  if k == 1 then return nil end
  if k == 2 then return pick(INTS) end
  if k == 3 then return pick(FLOATS) end
  if k == 4 then return pick(STRINGS) end
  if k == 5 or k == 6 then return tensor() end
  if k == 7 then return options(depth) end
  if k == 8 then return list(depth) end
  if k == 9 then return R(2) == 1 end
  return function(...) return gen(depth + 1) end
end

-- ---------------------------------------------------------------------------------------
-- what gets called

-- Left out: what takes over the terminal or the process, writes outside the work directory
-- (experiment and report folders), or loops as long as its arguments say (training runners).
local SKIP = {repl = true, progress = true, experiment = true, train = true, report = true,
              util = true, viz = true, captioner = true, models = true, draw = true,
              planar = true, set_num_threads = true, no_grad = false}

local targets = {}

local function add_module(prefix, m)
  local names = {}
  for name, v in pairs(m) do
    if type(v) == "function" and type(name) == "string" and not name:match("^_")
      and not SKIP[name] then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do targets[#targets + 1] = {prefix .. name, m[name]} end
end

add_module("glimpse.", glimpse)
for _, sub in ipairs({"image", "data", "attention", "decode", "metrics", "init"}) do
  add_module("glimpse." .. sub .. ".", glimpse[sub])
end

-- tensor methods: t:name(...)
local methods = {}
do
  local probe = glimpse.zeros(1)
  for name in pairs(glimpse.Tensor) do
    if type(name) == "string" and not name:match("^_") and type(probe[name]) == "function" then
      methods[#methods + 1] = name
    end
  end
  table.sort(methods)
  for _, name in ipairs(methods) do
    -- called with method syntax and not as a tail call, so errors can name the method
    local call = load("local t = ...; return (t:" .. name .. "(select(2, ...)))")
    targets[#targets + 1] = {"Tensor:" .. name, call, true}
  end
end

local function callable(v)
  local mt = getmetatable(v)
  return type(v) == "function" or type(mt) == "table" and mt.__call ~= nil
end

-- the sorted CamelCase names of a module's classes one can call
local function class_names(m)
  local names = {}
  for name, v in pairs(m) do
    if type(name) == "string" and name:match("^%u") and callable(v) then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

-- nn modules: construct with hostile arguments, then call the module on hostile inputs
for _, name in ipairs(class_names(glimpse.nn)) do
  targets[#targets + 1] = {"nn." .. name, function(...)
    local m = glimpse.nn[name](...)
    if type(m) == "table" or type(m) == "userdata" then
      local ok = pcall(m, gen(), gen(), gen())
      if R(2) == 1 then pcall(function() return m:parameters() end) end
      if R(3) == 1 then pcall(function() return m:load_state_dict(gen()) end) end
      if not ok and R(2) == 1 then pcall(function() return m:forward(tensor(), tensor()) end) end
    end
    return m
  end}
end

-- optimizers: over a few parameters, stepped after a backward
for _, name in ipairs(class_names(glimpse.optim)) do
  targets[#targets + 1] = {"optim." .. name, function(a, b)
    local p = glimpse.randn(3, 2):requires_grad(true)
    local o = glimpse.optim[name](R(2) == 1 and {p} or a, b)
    if type(o) == "table" then
      pcall(function() p:sum():backward() end)
      pcall(function() return o:step() end)
      pcall(function() return o:zero_grad() end)
    end
    return o
  end}
end

-- ---------------------------------------------------------------------------------------
-- the loop

local last = opts.last and assert(io.open(opts.last, "w"))

local function describe(v)
  if glimpse.is_tensor(v) then
    local ok, s = pcall(function() return "tensor[" .. table.concat(v.shape, ",") .. "]" end)
    return ok and s or "tensor(closed)"
  end
  if type(v) == "string" then return string.format("%q", #v > 40 and v:sub(1, 40) .. "..." or v) end
  if type(v) == "table" then
    local parts = {}
    for k, x in pairs(v) do
      parts[#parts + 1] = tostring(k) .. "=" .. (type(x) == "table" and "{..}" or describe(x))
      if #parts > 6 then break end
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

local last_len = 0
local function note_call(name, args, n)
  if not last then return end
  local parts = {}
  for i = 1, n do parts[i] = describe(args[i]) end
  last:seek("set")
  local line = name .. "(" .. table.concat(parts, ", ") .. ")"
  last:write(line, string.rep(" ", math.max(0, last_len - #line)), "\n")   -- cover the last
  last_len = #line
  last:flush()
end

local deadline
local function too_long()
  if os.clock() > deadline then error("api fuzz: the call ran past " .. CALL_SECONDS .. " s", 2) end
end

local INTERNAL = {"attempt to ", "stack overflow"}
local calls, errors, internal, per_fn = 0, 0, 0, {}
local t_end = os.clock() + opts.seconds
local wall_end = os.time() + opts.seconds + 1
local check_every = 64

while true do
  if calls % check_every == 0 then
    if os.clock() > t_end or os.time() > wall_end then break end
    collectgarbage("step", 200)
  end
  local t = pick(targets)
  local n = R(0, 4)
  local args = {}
  if t[3] then args[1] = tensor() end            -- methods: a tensor first
  for i = (t[3] and 2 or 1), math.max(n, t[3] and 1 or 0) do args[i] = gen() end
  n = math.max(n, t[3] and 1 or 0)
  note_call(t[1], args, n)
  deadline = os.clock() + CALL_SECONDS
  debug.sethook(too_long, "", 100000)
  local ok, err = pcall(t[2], table.unpack(args, 1, n))
  debug.sethook()
  calls = calls + 1
  if not ok then
    errors = errors + 1
    local msg = tostring(err)
    for _, pat in ipairs(INTERNAL) do
      if msg:find(pat) then
        internal = internal + 1
        per_fn[t[1]] = per_fn[t[1]] or {0, msg:sub(1, 160)}
        per_fn[t[1]][1] = per_fn[t[1]][1] + 1
        break
      end
    end
  end
  if glimpse.image.max_pixels() < 16 or glimpse.image.max_pixels() > (1 << 25) then
    glimpse.image.set_max_pixels(1 << 25)      -- a call may have changed the cap
  end
end

if last then last:close(); os.remove(opts.last) end

local fns = {}
for name, c in pairs(per_fn) do fns[#fns + 1] = {name, c[1], c[2]} end
table.sort(fns, function(a, b) return a[2] > b[2] or a[2] == b[2] and a[1] < b[1] end)
for i = 1, #fns do
  print(string.format("  internal errors: %5d  %-36s e.g. %s", fns[i][2], fns[i][1],
                      fns[i][3]:gsub("\n.*", "")))
end
print(string.format("%d calls (seed %d) over %d functions: %d errors, %d internal Lua errors "
                    .. "in %d functions, no crash", calls, opts.seed, #targets, errors, internal,
                    #fns))
