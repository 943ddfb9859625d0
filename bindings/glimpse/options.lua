--- glimpse.options -- a constructor's options, declared once: validation (an unknown option
-- names the nearest real one), the `?name` listing, and a script's command-line flags all
-- read the same table.
--
--   local options = require "glimpse.options"
--   local OPTIONS = options.declare("nn.Attention", {
--     {"score", "string", "additive", choices = {"additive", "dot"}, help = "score function"},
--     {"query", "int", nil, range = {1}, required = true, help = "query width"},
--     {"dropout", "number", 0, range = {0, 1}, help = "dropout on the weights"},
--   })
--   local o = OPTIONS:check(user_options, 2)   -- a new table, defaults filled in
--   OPTIONS:add_flags(parser, {"score", "dropout"})       -- --score, --dropout
--
-- An entry: {name, type, default, range = {lo, hi}, choices = list or function() -> list,
-- required = true, help = "...", flag = "--att" (the script flag, default --name-with-dashes),
-- aliases = {"old_name"}, finite = true (a number: no infinity)}.  Types: "int", "number", "boolean", "string", "table",
-- "function", "tensor", "any", or several joined by "|" ("int|table").
local check = require "glimpse.check"

local M = {}

local Spec = {}
Spec.__index = Spec

local TYPES = {int = true, number = true, boolean = true, string = true, table = true,
               ["function"] = true, tensor = true, any = true}

local is_tensor = require("glimpse").is_tensor

--- options.declare(owner, entries) -> a spec; owner names the constructor in messages
function M.declare(owner, entries)
  if type(owner) ~= "string" then error("options.declare: owner must be a string", 2) end
  if type(entries) ~= "table" then error("options.declare: entries must be a table", 2) end
  local spec = setmetatable({owner = owner, entries = {}, by_name = {}, names = {}}, Spec)
  for i, e in ipairs(entries) do
    local name, ty = e[1], e[2]
    if type(name) ~= "string" or type(ty) ~= "string" then
      error(string.format("options.declare(%s): entry %d needs {name, type, default}", owner, i), 2)
    end
    for t in ty:gmatch("[^|]+") do
      if not TYPES[t] then
        error(string.format("options.declare(%s): option '%s' has unknown type '%s'", owner,
                            name, t), 2)
      end
    end
    if spec.by_name[name] then
      error(string.format("options.declare(%s): option '%s' declared twice", owner, name), 2)
    end
    local entry = {name = name, type = ty, default = e[3], range = e.range, choices = e.choices,
                   required = e.required, help = e.help or "", flag = e.flag,
                   aliases = e.aliases, finite = e.finite}
    spec.entries[#spec.entries + 1] = entry
    spec.by_name[name] = entry
    spec.names[#spec.names + 1] = name
    for _, a in ipairs(e.aliases or {}) do spec.by_name[a] = entry end
  end
  return spec
end

--- spec:extend(owner, entries) -> a new spec with this one's entries and more (a subclass)
function Spec:extend(owner, entries)
  local all = {}
  for _, e in ipairs(self.entries) do
    all[#all + 1] = {e.name, e.type, e.default, range = e.range, choices = e.choices,
                     required = e.required, help = e.help, flag = e.flag, aliases = e.aliases,
                     finite = e.finite}
  end
  for _, e in ipairs(entries or {}) do all[#all + 1] = e end
  return M.declare(owner, all)
end

local function choices_of(e)
  local c = e.choices
  if type(c) == "function" then c = c() end
  return c
end

-- "a positive integer", "a number in [0, 1]", "one of a, b", "a boolean" ...
local function describe(e)
  local parts = {}
  for t in e.type:gmatch("[^|]+") do
    local lo, hi = e.range and e.range[1], e.range and e.range[2]
    if t == "int" then
      parts[#parts + 1] = lo == 1 and not hi and "a positive integer"
        or lo and hi and string.format("an integer in [%d, %d]", lo, hi)
        or lo and string.format("an integer >= %d", lo) or "an integer"
    elseif t == "number" then
      local n = e.finite and "a finite number" or "a number"
      parts[#parts + 1] = lo and hi and string.format("%s in [%g, %g]", n, lo, hi)
        or lo and string.format("%s >= %g", n, lo)
        or hi and string.format("%s <= %g", n, hi) or n
    elseif t == "boolean" then
      parts[#parts + 1] = "a boolean (true or false)"
    elseif t == "string" and choices_of(e) then
      parts[#parts + 1] = "one of " .. table.concat(choices_of(e), ", ")
    else
      parts[#parts + 1] = (t == "int" or t == "any") and "any value" or "a " .. t
    end
  end
  return table.concat(parts, " or ")
end
M.describe = describe

local function fits(e, t, v)
  if t == "any" then return true end
  if t == "tensor" then return is_tensor(v) end
  if t == "int" then
    if math.type(v) ~= "integer" then return false end
  elseif t == "number" then
    if type(v) ~= "number" or v ~= v then return false end
    if e.finite and (v == math.huge or v == -math.huge) then return false end
  elseif type(v) ~= t then
    return false
  end
  if (t == "int" or t == "number") and e.range then
    local lo, hi = e.range[1], e.range[2]
    if (lo and v < lo) or (hi and v > hi) then return false end
  end
  if t == "string" then
    local c = choices_of(e)
    if c then
      for _, x in ipairs(c) do if x == v then return true end end
      return false
    end
  end
  return true
end

--- spec:check_value(name, v, level) -> v when it fits the option, else an error naming it
function Spec:check_value(name, v, level)
  local e = self.by_name[name]
  for t in e.type:gmatch("[^|]+") do
    if fits(e, t, v) then return v end
  end
  local c = choices_of(e)
  if type(v) == "string" and c and e.type == "string" then   -- "unknown score 'foo' (one of ...)"
    check.fail((level or 1) + 1, "%s: unknown %s '%s' (%sone of %s)", self.owner, e.name, v,
               check.nearest(v, c) and string.format("did you mean '%s'? ", check.nearest(v, c))
               or "", table.concat(c, ", "))
  end
  check.fail((level or 1) + 1, "%s: option '%s' must be %s, got %s", self.owner, e.name,
             describe(e), check.value(v))
end

-- an option o holds that the spec does not know: an error naming the nearest real one
local function refuse_unknown(self, o, level)
  local keys = {}
  for k in pairs(o) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    if type(k) ~= "string" or not self.by_name[k] then
      local names = {}
      for _, n in ipairs(self.names) do names[#names + 1] = n end
      table.sort(names)
      local near = check.nearest(tostring(k), names)
      check.fail(level + 1, "%s: unknown option '%s' (%soptions: %s)", self.owner, tostring(k),
                 near and string.format("did you mean '%s'? ", near) or "",
                 table.concat(names, ", "))
    end
  end
end

--- spec:check(o, level) -> a new table: o's options checked, the defaults of the others
--- filled in.  o may be nil.  An unknown option, a wrong type or range, a missing required
--- option is an error naming the owner and the option (with the nearest name for a typo).
--- level: as error's, counted from the caller of check (2: the caller's caller).
function Spec:check(o, level)
  level = (level or 1) + 1
  if o ~= nil and type(o) ~= "table" then
    check.fail(level, "%s: expected an options table {%s=, ...}, got %s", self.owner,
               self.names[1] or "", type(o))
  end
  o = o or {}
  refuse_unknown(self, o, level)
  local out = {}
  for _, e in ipairs(self.entries) do
    local v = o[e.name]
    for _, a in ipairs(e.aliases or {}) do
      if v == nil then v = o[a] end
    end
    if v == nil then
      if e.required then
        check.fail(level, "%s: option '%s' is required (%s)", self.owner, e.name, e.help)
      end
      v = e.default
      if type(v) == "table" then   -- a fresh copy: a default table is never shared
        local c = {}
        for kk, x in pairs(v) do c[kk] = x end
        v = c
      end
    else
      self:check_value(e.name, v, level)
    end
    out[e.name] = v
  end
  return out
end

--- spec:known(o, level): only the unknown-option check, for a constructor that reads and
--- checks o's values itself
function Spec:known(o, level)
  if o == nil then return end
  if type(o) ~= "table" then
    check.fail((level or 1) + 1, "%s: options must be a table, got %s", self.owner, type(o))
  end
  refuse_unknown(self, o, (level or 1) + 1)
end

local function default_text(e)
  if e.required then return "required" end
  local d = e.default
  if d == nil then return "-" end
  if type(d) == "table" then
    local parts = {}
    for i, x in ipairs(d) do parts[i] = tostring(x) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return type(d) == "string" and string.format("%q", d) or tostring(d)
end

--- spec:lines() -> the listing `?name` prints: one line per option (name, type, default,
--- range or choices, help)
function Spec:lines()
  local rows, w1, w2 = {}, 4, 4
  for _, e in ipairs(self.entries) do
    local kind = e.type
    if e.range then
      kind = kind .. string.format(" [%s, %s]", e.range[1] or "", e.range[2] or "")
    end
    local c = choices_of(e)
    if c and e.type:find("string") then kind = table.concat(c, "|") end
    if #kind > 40 then kind = kind:sub(1, 37) .. "..." end
    rows[#rows + 1] = {e.name, kind, default_text(e), e.help}
    w1, w2 = math.max(w1, #e.name), math.max(w2, #kind)
  end
  local out = {self.owner .. " options:"}
  for _, r in ipairs(rows) do
    out[#out + 1] = string.format("  %-" .. w1 .. "s  %-" .. w2 .. "s  %-8s  %s", r[1], r[2],
                                  r[3], r[4])
  end
  return out
end

--- spec:flag_name(name) -> the command-line flag of an option ("--attn-hidden")
function Spec:flag_name(name)
  local e = self.by_name[name]
  return e.flag or "--" .. e.name:gsub("_", "-")
end

--- spec:add_flags(parser, names, overrides) -> parser: a flag for each named option (all
--- when names is nil) on an argparse parser.  A boolean whose default is true becomes
--- --no-<flag>, else --<flag>; other options take a value, converted and checked by the
--- option's type when the script calls spec:from_args.  overrides[name] = {default=,
--- help=} changes what the script shows (the constructor's own default stays); a boolean
--- whose script default differs from the constructor's puts it in args when the flag is
--- absent; default = false for an option that is not a boolean: the flag has no default
--- (absent, the option stays out of spec:from_args's result).
function Spec:add_flags(parser, names, overrides)
  overrides = overrides or {}
  local list = names or self.names
  for _, name in ipairs(list) do
    local e = self.by_name[name]
    if not e then
      error(string.format("%s:add_flags: unknown option '%s'%s", self.owner, tostring(name),
                          check.did_you_mean(tostring(name), self.names)), 2)
    end
    local ov = overrides[name] or {}
    local default = ov.default
    if default == nil then default = e.default end
    if ov.default == false and e.type ~= "boolean" then default = nil end   -- no default
    local help = ov.help or e.help
    local flag = self:flag_name(name)
    if e.type == "boolean" then
      local f
      if default == true then
        local neg = e.flag or "--no-" .. e.name:gsub("_", "-")
        f = parser:flag(neg, help .. " (off)"):target(name):action("store_false")
      else
        f = parser:flag(flag, help):target(name)
      end
      if default ~= e.default then f:default(default) end
    else
      local c = choices_of(e)
      local shown = default ~= nil and type(default) ~= "table" and tostring(default) or nil
      local opt = parser:option(flag, help, shown):target(name)
      if c and e.type == "string" then opt:choices(c) end
      if e.type:find("int") or e.type:find("number") then
        opt:convert(function(s)
          local n = tonumber(s)
          if n and e.type:find("int") and math.tointeger(n) then n = math.tointeger(n) end
          return n, not n and string.format("%s must be a number, got '%s'", flag, s) or nil
        end)
      end
    end
  end
  return parser
end

--- spec:from_args(args, names, level) -> a table of the named options (all when nil) that
--- args (argparse's result) holds, each checked: what a script passes to the constructor
function Spec:from_args(args, names, level)
  local out = {}
  for _, name in ipairs(names or self.names) do
    local v = args[name]
    if v ~= nil then
      local e = self.by_name[name]
      if e.type == "boolean" and e.default == true and v == false then
        out[name] = false
      else
        local ok, err = pcall(self.check_value, self, name, v, 1)
        if not ok then
          check.fail((level or 1) + 1, "%s: %s", self:flag_name(name), check.strip(err))
        end
        out[name] = v
      end
    end
  end
  return out
end

M.Spec = Spec
return M
