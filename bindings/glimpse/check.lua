--- glimpse.check -- the small things every file of the library needs, in one place (the part
-- lauxlib plays for Lua's own libraries): shape strings, errors that name the function,
-- the "file:line: " prefix strip, integer and range checks, the nearest name for a typo.
--
--   local check = require "glimpse.check"
--   check.fail(2, "%s: x must be (B,D), got %s", fname, check.shape(x))
--   local n = check.int(fname, "steps", v, 1, nil, 2)        -- an integer >= 1
local M = {}

--- check.shape(t) -> "[2,3]" for a tensor, else the Lua type ("nil", "table", ...)
function M.shape(t)
  if type(t) == "userdata" and type(t.shape) == "table" then
    return "[" .. table.concat(t.shape, ",") .. "]"
  end
  return type(t)
end

--- check.fail(level, fmt, ...): error(string.format(fmt, ...)) reported at the caller `level`
--- frames above the function that calls check.fail (1: that function's own line)
function M.fail(level, fmt, ...)
  error(string.format(fmt, ...), level + 1)
end

--- check.strip(err) -> the message of a caught error without its "file:line: " prefix
function M.strip(err)
  return (tostring(err):gsub("^[^\n:]*:%d+: ", ""))
end

--- check.rethrow(fname, err, level): a caught error raised again as "fname: message"
function M.rethrow(fname, err, level)
  error(fname .. ": " .. M.strip(err), (level or 1) + 1)
end

--- check.integers(v) -> v with every integral number made an integer again, deeply (JSON
--- gives floats back: sizes and ids must be integers)
function M.integers(v)
  if type(v) == "number" then return math.tointeger(v) or v end
  if type(v) ~= "table" then return v end
  for k, x in pairs(v) do v[k] = M.integers(x) end
  return v
end

--- check.value(v) -> a short text of a value for an error message ("'abc'", "3", "a table")
function M.value(v)
  if type(v) == "string" then
    return "'" .. (#v > 40 and v:sub(1, 40) .. "..." or v) .. "'"
  elseif type(v) == "number" or type(v) == "boolean" or v == nil then
    return tostring(v)
  end
  return "a " .. type(v)
end

--- check.int(fname, what, v, lo, hi, level) -> v: an integer in [lo, hi] (nil: no bound)
function M.int(fname, what, v, lo, hi, level)
  if math.type(v) ~= "integer" or (lo and v < lo) or (hi and v > hi) then
    local want = lo == 1 and not hi and "a positive integer"
      or lo and hi and string.format("an integer in [%d, %d]", lo, hi)
      or lo and string.format("an integer >= %d", lo)
      or hi and string.format("an integer <= %d", hi) or "an integer"
    M.fail((level or 1) + 1, "%s: %s must be %s, got %s", fname, what, want, M.value(v))
  end
  return v
end

--- check.number(fname, what, v, lo, hi, level) -> v: a number (not NaN) in [lo, hi]
function M.number(fname, what, v, lo, hi, level)
  if type(v) ~= "number" or v ~= v or (lo and v < lo) or (hi and v > hi) then
    local want = lo and hi and string.format("a number in [%g, %g]", lo, hi)
      or lo and string.format("a number >= %g", lo)
      or hi and string.format("a number <= %g", hi) or "a number"
    M.fail((level or 1) + 1, "%s: %s must be %s, got %s", fname, what, want, M.value(v))
  end
  return v
end

--- check.table(fname, what, v, level) -> v, or an error when v is not a table
function M.table(fname, what, v, level)
  if type(v) ~= "table" then
    M.fail((level or 1) + 1, "%s: %s must be a table, got %s", fname, what, type(v))
  end
  return v
end

--- check.distance(a, b) -> the edit distance of two short strings (names): one-letter
--- insertions, deletions, substitutions and swaps of neighbours ("stpes" -> "steps" is 1);
--- math.huge past 200 letters
local function distance(a, b)
  if #a > 200 or #b > 200 then return math.huge end
  local d = {}
  for i = 0, #a do d[i] = {[0] = i} end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end
M.distance = distance

--- check.nearest(name, candidates) -> the candidate closest to name when it is close enough
--- to be a typo (at most a third of its letters differ), else nil
function M.nearest(name, candidates)
  if type(name) ~= "string" then return nil end
  local best, best_d
  for _, c in ipairs(candidates) do
    local d = distance(name:lower(), c:lower())
    if not best_d or d < best_d or (d == best_d and c < best) then best, best_d = c, d end
  end
  -- close enough to be a typo, and not a guess that replaces every letter of a short name
  if best and best_d <= math.max(1, #name // 3) and best_d < #name then return best end
  return nil
end

--- check.did_you_mean(name, candidates) -> " (did you mean 'x'?)" or ""
function M.did_you_mean(name, candidates)
  local n = M.nearest(name, candidates)
  return n and string.format(" (did you mean '%s'?)", n) or ""
end

return M
