--- glimpse.optim.base -- what glimpse.optim's parts share (private; use glimpse.optim): deep
-- copies, the exact JSON a state_dict's metadata holds, whole numbers for integer options,
-- and the class factory of optimizers and schedules.  optim/init.lua (optimizers),
-- optim/sched.lua (schedules) and optim/clip.lua (clipping) use it.
local cjson = require "cjson"
local check = require "glimpse.check"

local B = {}

--- B.copy(v) -> a deep copy of a table (other values as they are).
function B.copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = B.copy(x) end
  return t
end

-- The shortest decimal form of x that reads back as the same double.
local function number_str(x)
  if math.type(x) == "integer" then return string.format("%d", x) end
  if x ~= x or x == math.huge or x == -math.huge then
    error("optim: cannot store the non-finite number " .. tostring(x) .. " in a state_dict", 0)
  end
  for _, f in ipairs {"%.15g", "%.16g", "%.17g"} do
    local s = string.format(f, x)
    if tonumber(s) == x then return s end
  end
  return string.format("%.17g", x)
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

--- B.to_json(v) -> JSON text for the small values a state_dict holds: numbers, booleans,
--- strings, arrays and string-keyed objects (keys sorted, so the same state gives the same
--- bytes).  lua-cjson's encoder keeps only 14 digits, too few for an exact resume; its
--- decoder reads all 17.
function B.to_json(v)
  local t = type(v)
  if t == "number" then return number_str(v) end
  if t == "boolean" then return v and "true" or "false" end
  if t == "string" then return json_string(v) end
  if t ~= "table" then
    error("optim: cannot store a " .. t .. " in a state_dict", 0)
  end
  if next(v) == nil then return "[]" end
  local n = #v
  local is_array = n > 0
  if is_array then
    for k in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > n then is_array = false break end
    end
  end
  local parts = {}
  if is_array then
    for i = 1, n do parts[i] = B.to_json(v[i]) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local x = v[k]
    if x == nil then x = v[tonumber(k)] end
    parts[i] = json_string(k) .. ":" .. B.to_json(x)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

--- B.from_json(s, what, level) -> the value of the JSON text s, the metadata entry `what`;
--- a missing entry or bad JSON is an error blamed `level` frames up.
function B.from_json(s, what, level)
  if type(s) ~= "string" then
    check.fail(level + 1, "load_state_dict: metadata '%s' is missing", what)
  end
  local ok, v = pcall(cjson.decode, s)
  if not ok then
    check.fail(level + 1, "load_state_dict: metadata '%s' is not valid JSON (%s)", what, v)
  end
  return v
end

--- B.as_int(x) -> x as an integer when it is integral (JSON numbers come back as floats).
function B.as_int(x)
  return math.tointeger(x) or x
end

--- B.whole(spec, o) -> o, or a copy of it whose integer options given as integral floats
--- (10.0, read from JSON or computed) are integers, so that spec:check takes them
function B.whole(spec, o)
  if type(o) ~= "table" then return o end
  local out
  for k, v in pairs(o) do
    local e = type(k) == "string" and spec.by_name[k]
    if e and e.type:find("int", 1, true) and math.type(v) == "float" and math.tointeger(v) then
      out = out or B.copy_shallow(o)
      out[k] = math.tointeger(v)
    end
  end
  return out or o
end

--- B.copy_shallow(t) -> a new table with t's entries
function B.copy_shallow(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

--- B.class(spec, parent, new) -> spec as a class: instances look methods up in spec, then in
--- parent; calling the class, cls(a, b), returns new(cls, a, b, level) with errors blamed on
--- the caller.  spec.options (a glimpse.options spec) is what `?` lists.
function B.class(spec, parent, new)
  local cls = setmetatable(spec, {
    __index = parent,
    __call = function(c, a, b)
      local o = new(c, a, b, 2)   -- not a tail call: error levels count it
      return o
    end,
  })
  cls.__index = cls
  return cls
end

return B
