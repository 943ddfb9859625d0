--- glimpse.cli.repl (glimpse.repl) -- what the REPL prints: tables by their contents, and
-- `?name` help (cli/help.lua).
--
--   glimpse.repl.pretty({8, 64})                       --> "{8, 64}"
--   glimpse.repl.pretty(t, {depth = 2, width = 60, items = 10})
--   glimpse.repl.help("nn.LSTM")                        -- what `?nn.LSTM` prints
--
-- The REPL (bindings/main.c) calls show(...) on the values of an expression: a table prints
-- as its contents, everything else as print shows it (tensors their data, modules their
-- layers).  The global print is left alone.  Inside a table a tensor is its one-line summary,
-- a module its name.
local M = {}

local DEFAULT_DEPTH = 4      -- nesting levels shown; deeper tables print as {...}
local DEFAULT_WIDTH = 80     -- a table fits on one line when its text is at most this wide
local DEFAULT_ITEMS = 50     -- entries shown per table; the rest are counted

-- ---------------------------------------------------------------------------------------
-- pretty printing

local is_tensor = require("glimpse").is_tensor
local is_module = require("glimpse.nn.module").is_module

local ESCAPES = {["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\\"] = "\\\\",
                 ['"'] = '\\"', ["\0"] = "\\0"}

local function quote(s)
  return '"' .. s:gsub('[%c\\"]', function(c)
    return ESCAPES[c] or string.format("\\%d", c:byte())
  end) .. '"'
end

local function tensor_summary(t)
  local dims = {}
  for i, d in ipairs(t.shape) do dims[i] = tostring(d) end
  local size = #dims == 0 and "()" or table.concat(dims, "x")
  return "[glimpse.Tensor of size " .. size .. (t.requires_grad_flag and ", requires grad]" or "]")
end

-- a module as its name: "Linear(4 -> 3)" when its own description is short, else "Linear"
local function module_summary(m)
  local name = m.__name or "Module"
  local ok, extra = pcall(function() return m:extra_repr() end)
  if ok and type(extra) == "string" and extra ~= "" and #extra <= 40 and not extra:find("\n") then
    return name .. "(" .. extra .. ")"
  end
  return name
end

-- the text of a value that is not a table to open
local function scalar(v)
  local t = type(v)
  if t == "string" then return quote(v) end
  if t == "number" then
    if math.type(v) == "float" and v == math.floor(v) and v > -1e15 and v < 1e15 then
      return string.format("%.1f", v)
    end
    return tostring(v)
  end
  if is_tensor(v) then return tensor_summary(v) end
  if is_module(v) then return module_summary(v) end
  return nil
end

local TYPE_ORDER = {number = 1, string = 2, boolean = 3}

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    local oa, ob = TYPE_ORDER[ta] or 4, TYPE_ORDER[tb] or 4
    if oa ~= ob then return oa < ob end
    return ta < tb
  end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return (not a) and b end
  return tostring(a) < tostring(b)
end

-- the keys of t: the array part 1..n in order, then the others sorted by type then value
local function sorted_keys(t)
  local n = 0
  while rawget(t, n + 1) ~= nil do n = n + 1 end
  local keys, rest = {}, {}
  for i = 1, n do keys[i] = i end
  for k in next, t do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then rest[#rest + 1] = k end
  end
  table.sort(rest, key_less)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys, n
end

local KEYWORDS = {}
for w in ("and break do else elseif end false for function goto if in local nil not or " ..
          "repeat return then true until while"):gmatch("%a+") do KEYWORDS[w] = true end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") and not KEYWORDS[k] then return k end
  return "[" .. (scalar(k) or tostring(k)) .. "]"
end

-- a table whose metatable has its own __tostring (and is not a module) prints with it
local function custom_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

-- render(v, o, indent, depth, path, lead) -> text; path holds the tables being printed
-- (cycles); lead: the width of what precedes the value on its line ("key = ")
local function render(v, o, indent, depth, path, lead)
  local s = scalar(v)
  if s then return s end
  if type(v) ~= "table" then return tostring(v) end
  if custom_tostring(v) then
    local ok, text = pcall(tostring, v)
    if ok then return text end
  end
  if path[v] then return "<cycle: " .. tostring(v) .. ">" end
  local keys, n = sorted_keys(v)
  if #keys == 0 then return "{}" end
  if depth >= o.depth then return string.format("{... %d entr%s}", #keys, #keys == 1 and "y" or "ies") end
  path[v] = true
  local shown = math.min(#keys, o.items)
  local parts = {}
  for i = 1, shown do
    local k = keys[i]
    local key = i <= n and "" or key_text(k) .. " = "
    parts[i] = key .. render(v[k], o, indent .. "  ", depth + 1, path, #key)
  end
  path[v] = nil
  if #keys > shown then parts[#parts + 1] = string.format("... (%d more)", #keys - shown) end
  local one = "{" .. table.concat(parts, ", ") .. "}"
  if #one + #indent + lead + 1 <= o.width and not one:find("\n") then return one end
  local inner = indent .. "  "
  return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. "\n" .. indent .. "}"
end

local function options(opts, fname)
  opts = opts or {}
  if type(opts) ~= "table" then
    error(string.format("%s: opts must be a table {depth=, width=, items=}, got %s", fname,
                        type(opts)), 3)
  end
  local o = {depth = opts.depth or DEFAULT_DEPTH, width = opts.width or DEFAULT_WIDTH,
             items = opts.items or DEFAULT_ITEMS}
  for _, k in ipairs({"depth", "width", "items"}) do
    if math.type(o[k]) ~= "integer" or o[k] < 1 then
      error(string.format("%s: opts.%s must be a positive integer, got %s", fname, k,
                          tostring(opts[k])), 3)
    end
  end
  return o
end

--- glimpse.repl.pretty(value, {depth=4, width=80, items=50}) -> string
-- The text the REPL shows for a value inside a table: tables by their contents (the array
-- part first, then the other keys sorted by type and value; strings quoted), on one line
-- when that fits in `width` columns ({8, 64}), else one entry per line, indented.  Tables
-- deeper than `depth` print as {... N entries}; past `items` entries a table ends with
-- "... (N more)"; a table met again inside itself prints as <cycle: table: 0x...>.
-- Tensors print as their summary ([glimpse.Tensor of size 2x3]), modules as their name,
-- objects with a __tostring through it.
function M.pretty(v, opts)
  local o = options(opts, "repl.pretty")
  return render(v, o, "", 0, {}, 0)
end

--- glimpse.repl.show(...) -- print values the way the REPL's auto-print does: a plain
-- table through pretty, anything else as print shows it (a tensor with its data, a module
-- with its layers), several values separated by tabs.  Uses the global print.
function M.show(...)
  local n = select("#", ...)
  if n == 0 then return end
  local out = table.pack(...)
  for i = 1, n do
    local v = out[i]
    if type(v) == "table" and not is_module(v) and not custom_tostring(v) then
      out[i] = M.pretty(v)
    end
  end
  print(table.unpack(out, 1, n))
end

-- ---------------------------------------------------------------------------------------
-- help: `?name` (glimpse.cli.help, published here so one module is the REPL's)

local help = require "glimpse.cli.help"
M.help, M.doc, M.lookup, M.reset = help.help, help.doc, help.lookup, help.reset

return M
