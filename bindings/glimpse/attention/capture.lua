--- glimpse.attention.capture -- every attention map computed inside a function, keyed by
-- module path (the idea of PyTorch's forward hooks and TransformerLens's run_with_cache).
--
--   local maps, loss = glimpse.attention.capture(function() return model:loss(b) end, model)
--   maps["decoder.1.multihead_attn"]   --> (B,heads,T,S): per head, not averaged
--   maps["attention"]                  --> (B,T,S): an RNN decoder's steps, stacked
--   glimpse.attention.capture.to_table(maps)   --> plain nested tables (JSON, viewers)
--
-- The modules that compute attention call record/record_step below, each behind one test of
-- `capture.active`, which is false unless a capture runs: off, nothing is kept and nothing
-- is computed for it.  Paths are the names of root:named_modules() (the prefixes of
-- root:state_dict()); docs/api/inspect.md documents the keys and the table format.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {active = false}

local sessions = {}                             -- the captures running, innermost last
local INFO = setmetatable({}, {__mode = "k"})   -- maps table -> {keys = {...}, [key] = info}

local function is_module(v)
  return type(v) == "table" and type(v.named_modules) == "function"
end

local function class_of(owner)
  if type(owner) == "string" then return owner end
  return owner.__name or "Module"
end

-- the path of owner in session s: its name under the root, else its class name (a second
-- module of that class outside the root gets "Class[2]", and so on)
local function path_of(s, owner)
  local p = s.names[owner]
  if p then return p end
  if type(owner) == "string" then p = owner
  else
    local cls = class_of(owner)
    local n = (s.outside[cls] or 0) + 1
    s.outside[cls] = n
    p = n == 1 and cls or string.format("%s[%d]", cls, n)
  end
  s.names[owner] = p
  return p
end

-- a new entry (one call of one module, one field) with its key: path, "#k" from the second
-- call on, ":field" for a second map of the same call
local function new_entry(s, owner, field, info)
  local path = path_of(s, owner)
  local id = path .. "\0" .. (field or "")
  local call = (s.calls[id] or 0) + 1
  s.calls[id] = call
  local key = path .. (call > 1 and "#" .. call or "") .. (field and ":" .. field or "")
  local e = {key = key, path = path, call = call, field = field, module = class_of(owner),
             heads = info and info.heads,
             grid = info and info.grid, extra = info and info.extra, rows = {}}
  s.entries[#s.entries + 1] = e
  return e
end

local function log(s, path, field, t)
  local l = s.log
  l[#l + 1] = {path = path, field = field, map = t}
end

--- capture.record(owner, P (B,heads,T,S), info): one call's whole map (multi-head modules);
--- owner: the module (or a name for a function without one); info: {heads=}
function M.record(owner, P, info)
  P = P:detach()
  for _, s in ipairs(sessions) do
    local e = new_entry(s, owner, nil, info)
    e.map = P
    log(s, e.path, nil, P)
  end
end

--- capture.record_step(owner, row (B,S), field, info): one step's map of a module called
--- once per step; the steps of one sequence stack into (B,T,S).  field: nil for the weights,
--- a name ("sample") for another map of the same step; info: {grid=, extra=}
function M.record_step(owner, row, field, info)
  row = row:detach()
  local B, S = row.shape[1], row.shape[2]
  for _, s in ipairs(sessions) do
    local byowner = s.open[owner]
    if not byowner then byowner = {}; s.open[owner] = byowner end
    local e = byowner[field or 1]
    if not e or e.B ~= B or e.S ~= S then           -- a new sequence, or rows came or went
      e = new_entry(s, owner, field, info)
      e.B, e.S = B, S
      byowner[field or 1] = e
    end
    e.rows[#e.rows + 1] = row
    log(s, e.path, field, row)
  end
end

--- capture.new_sequence(owner): the next step of owner starts a new call (a new batch)
function M.new_sequence(owner)
  for _, s in ipairs(sessions) do s.open[owner] = nil end
end

--- capture.mark() -> a position in the innermost capture's log (nil when none runs)
--- capture.since(mark) -> the records made after it: list of {path=, field=, map=} in order
--- (what glimpse.decode.beam uses to give each hypothesis its maps)
function M.mark()
  local s = sessions[#sessions]
  return s and {s = s, n = #s.log} or nil
end

function M.since(mark)
  local out = {}
  if not mark then return out end
  local l = mark.s.log
  for i = mark.n + 1, #l do out[#out + 1] = l[i] end
  return out
end

-- the session's entries as the maps table handed back
local function finish(s)
  local maps, info = {}, {keys = {}}
  for _, e in ipairs(s.entries) do
    local t = e.map
    if not t then t = glimpse.no_grad(function() return glimpse.stack(e.rows, 2) end) end
    maps[e.key] = t
    info.keys[#info.keys + 1] = e.key
    info[e.key] = {key = e.key, path = e.path, call = e.call, field = e.field,
                   module = e.module, heads = e.heads, grid = e.grid,
                   extra = e.extra, steps = not e.map and #e.rows or nil}
  end
  INFO[maps] = info
  return maps
end

local function pop(s)
  for i = #sessions, 1, -1 do
    if sessions[i] == s then table.remove(sessions, i) end
  end
  M.active = #sessions > 0
end

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

local function check_args(fn, root)          -- errors at the line calling capture
  if not callable(fn) then
    check.fail(3, "attention.capture: argument #1 must be a function, got %s", type(fn))
  end
  if root ~= nil and not is_module(root) then
    check.fail(3, "attention.capture: argument #2 (root) must be an nn.Module or nil, got %s",
               type(root))
  end
end

local function run(fn, root)
  local s = {names = {}, outside = {}, calls = {}, entries = {}, open = {}, log = {}}
  if root then
    for name, m in root:named_modules() do
      if name ~= "" and s.names[m] == nil then s.names[m] = name end
    end
  end
  sessions[#sessions + 1] = s
  M.active = true
  local res = table.pack(pcall(fn))
  pop(s)
  if not res[1] then error(res[2], 0) end
  return finish(s), table.unpack(res, 2, res.n)
end

--- capture(fn, root) -> maps, fn's results
-- Runs fn() and returns every attention map computed inside it: maps[key] a tensor, key the
-- module's path under root (root:named_modules()'s names; root itself and modules outside
-- it go by their class name).  Multi-head modules: (B,heads,T,S) per call; modules called
-- once per step (nn.Attention, nn.Pointer, the NTM's heads): (B,T,S), the steps in call
-- order.  A second call of a module gets "path#2"; hard attention's chosen cells
-- "path:sample".  An error in fn propagates (capture is off again).  Captures nest.
function M.capture(fn, root)
  check_args(fn, root)
  return run(fn, root)
end

--- capture.keys(maps) -> the keys of maps in the order their maps were first recorded
function M.keys(maps)
  local info = INFO[maps]
  if not info then check.fail(2, "attention.capture.keys: not a table made by capture") end
  return table.move(info.keys, 1, #info.keys, 1, {})
end

--- capture.info(maps, key) -> {key=, path=, call=, field=, module=, heads=, grid=,
--- extra=, steps=} of one map (nil for a key that is not there)
function M.info(maps, key)
  local info = INFO[maps]
  if not info then check.fail(2, "attention.capture.info: not a table made by capture") end
  local i = info[key]
  if not i then return nil end
  local c = {}
  for k, v in pairs(i) do c[k] = v end
  return c
end

--- capture.to_table(maps) -> {format = "glimpse.attention.capture", version = 1, maps = {
--- {key=, path=, call=, field=, module=, heads=, grid=, extra=, steps=, shape = {...},
--- data = nested lists}, ...}} in recording order: plain Lua tables (cjson encodes them)
function M.to_table(maps)
  local info = INFO[maps]
  if not info then check.fail(2, "attention.capture.to_table: not a table made by capture") end
  local out = {}
  for i, key in ipairs(info.keys) do
    local e = M.info(maps, key)
    local t = maps[key]
    e.shape, e.data = t.shape, t:totable()
    out[i] = e
  end
  return {format = "glimpse.attention.capture", version = 1, maps = out}
end

return setmetatable(M, {__call = function(_, fn, root)
  check_args(fn, root)
  return run(fn, root)
end})
