--- glimpse.progress -- progress bars for long-running work (training loops, evaluation,
-- data preparation), in the spirit of Torch7's xlua.progress and tqdm.
--
--   local bar = glimpse.progress.Bar{total = 4000, label = "train"}
--   for step = 1, 4000 do ...; bar:update(step, {loss = l}) end
--   bar:finish()
--
-- On a terminal one line is redrawn in place at most every `refresh` seconds; anywhere else
-- (a pipe, a log) a plain line comes every `every` items or `interval` seconds.  Whether the
-- output is a terminal is isatty() on its descriptor (glimpse._isatty), overridden by
-- GLIMPSE_PROGRESS=plain|tty or the `tty` option.
local glimpse = require "glimpse"
local options = require "glimpse.options"
local whole = require("glimpse.optim.base").whole

local M = {}

local DEFAULT_REFRESH = 0.1     -- seconds between terminal redraws
local DEFAULT_INTERVAL = 30     -- seconds between plain lines when `every` items take longer
local DEFAULT_LINES = 10        -- plain lines over a run of known length (every = total/10)
local BAR_WIDTH = 20

-- ---------------------------------------------------------------------------------------
-- formatting

--- progress.format_time(seconds) -> "m:ss", or "h:mm:ss" from one hour, "?" when unknown.
-- Negative values show as 0:00; nil, NaN and infinities as "?".
function M.format_time(s)
  if type(s) ~= "number" or s ~= s or s == math.huge or s == -math.huge then return "?" end
  s = math.max(0, math.floor(s + 0.5))
  local h, m, sec = s // 3600, (s % 3600) // 60, s % 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, sec) end
  return string.format("%d:%02d", m, sec)
end

-- A rate of items per second, "12.3 it/s", or "2.50 s/it" when slower than one per second.
local function format_rate(rate, unit)
  if not rate or rate ~= rate or rate == math.huge then return "? " .. unit .. "/s" end
  if rate <= 0 then return "0 " .. unit .. "/s" end
  if rate < 1 then return string.format("%.2f s/%s", 1 / rate, unit) end
  if rate < 100 then return string.format("%.1f %s/s", rate, unit) end
  return string.format("%.0f %s/s", rate, unit)
end

local function format_value(v, fmt)
  if fmt then return string.format(fmt, v) end
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then return string.format("%.4g", v) end
  return tostring(v)
end

-- ---------------------------------------------------------------------------------------
-- the bar

local Bar = {}
Bar.__index = Bar

-- which file descriptor a Lua file handle writes to, when it is one of the standard two
local function detect_tty(out)
  local env = os.getenv("GLIMPSE_PROGRESS")
  if env == "plain" then return false end
  if env == "tty" then return true end
  if not glimpse._isatty then return false end
  if out == io.stdout then return glimpse._isatty(1) end
  if out == io.stderr then return glimpse._isatty(2) end
  return false
end

Bar.options = options.declare("progress.Bar", {
  {"total", "int", nil, range = {1}, help = "number of items (nil: unknown, no percent or ETA)"},
  {"label", "string|number", "", help = "shown before the count"},
  {"every", "int", nil, range = {1}, help = "plain mode: a line every `every` items (total/10)"},
  {"interval", "number", DEFAULT_INTERVAL, range = {0},
   help = "plain mode: a line at least every `interval` seconds (> 0)"},
  {"refresh", "number", DEFAULT_REFRESH, range = {0}, help = "terminal: seconds between redraws"},
  {"unit", "string", "it", help = "the items' name in the rate"},
  {"unit_scale", "number", 1, range = {0}, help = "items per counted step for the rate (> 0)"},
  {"fields", "table", nil, help = "the order the fields appear in (others follow, sorted)"},
  {"formats", "table", nil, help = "string.format patterns per field"},
  {"time_limit", "number", nil, range = {0}, help = "the ETA is capped by the time left (> 0)"},
  {"out", "any", nil, help = "a file handle (default io.stdout)"},
  {"tty", "boolean", nil, help = "redraw one line in place (default: whether out is a terminal)"},
  {"clock", "function", nil, help = "a function returning seconds (default glimpse.clock)"},
  {"start", "number", 0, help = "the count at the start"},
})

--- progress.Bar{total=N, label="", every=K, interval=T, refresh=0.1, unit="it",
--                unit_scale=1, fields={"loss", ...}, formats={loss="%.4f"}, time_limit=s,
--                out=io.stdout, tty=auto, clock=glimpse.clock, start=0} -> bar
-- The options are progress.Bar.options.  every/interval: plain mode prints when the count
-- passes a multiple of `every` or `interval` seconds have passed since the last line; the
-- first update always prints.  unit_scale: a batch size shows images/s with unit="img".
setmetatable(Bar, {__call = function(_, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("progress.Bar: expected an options table {total=..., label=...}, got " .. type(opts), 2)
  end
  local o = Bar.options:check(whole(Bar.options, opts), 2)
  for _, name in ipairs({"interval", "unit_scale", "time_limit"}) do
    if o[name] ~= nil and not (o[name] > 0) then
      error(string.format("progress.Bar: option '%s' must be a positive number, got %s", name,
                          tostring(o[name])), 2)
    end
  end
  local out = o.out or io.stdout
  if type(out) ~= "userdata" and type(out) ~= "table" then
    error("progress.Bar: option 'out' must be a file handle (io.stdout, io.stderr, ...)", 2)
  end
  opts = o
  local clock = opts.clock or glimpse.clock
  local total = opts.total and math.tointeger(opts.total) or nil
  local self = setmetatable({}, Bar)
  self.total = total
  self.label = opts.label and tostring(opts.label) or ""
  self.every = opts.every and math.tointeger(opts.every)
               or (total and math.max(1, (total + DEFAULT_LINES - 1) // DEFAULT_LINES))
  self.interval = opts.interval or DEFAULT_INTERVAL
  self.refresh = opts.refresh or DEFAULT_REFRESH
  self.unit = opts.unit or "it"
  self.unit_scale = opts.unit_scale or 1
  self.order = opts.fields or {}
  self.formats = opts.formats or {}
  self.time_limit = opts.time_limit
  self.out = out
  self.tty = opts.tty
  if self.tty == nil then self.tty = detect_tty(out) end
  self.clock = clock
  self.count = opts.start or 0
  self.start_count = self.count
  self.values = {}
  self.t0 = clock()
  self.paused_at = nil
  self.last_draw = nil       -- clock time of the last terminal redraw / plain line
  self.last_count = nil      -- count at the last plain line
  self.width = 0             -- length of the line on screen (terminal mode)
  self.done = false
  return self
end})
M.Bar = Bar

--- bar:elapsed() -> seconds since the bar started, not counting paused time.
function Bar:elapsed()
  local now = self.paused_at or self.clock()
  return now - self.t0
end

--- bar:rate() -> items per second (times unit_scale) since the start, or nil before any.
function Bar:rate()
  local e, n = self:elapsed(), self.count - self.start_count
  if n <= 0 or e <= 0 then return nil end
  return n * self.unit_scale / e
end

--- bar:eta() -> seconds left at the average rate so far (capped by time_limit), or nil.
function Bar:eta()
  local e, n = self:elapsed(), self.count - self.start_count
  local eta
  if self.total and n > 0 and e > 0 then
    eta = math.max(0, self.total - self.count) * e / n
  end
  if self.time_limit then
    local left = math.max(0, self.time_limit - e)
    eta = eta and math.min(eta, left) or left
  end
  return eta
end

--- bar:pause() / bar:resume(): time between them does not count (evaluation inside a
-- training loop, for instance), so the rate and ETA describe the work being counted.
local timer = require("glimpse.util").timer_methods
Bar.pause, Bar.resume = timer.pause, timer.resume

-- the user fields, in the requested order then sorted
local function field_text(self, sep)
  local parts, seen = {}, {}
  for _, k in ipairs(self.order) do
    if self.values[k] ~= nil then
      parts[#parts + 1] = k .. sep .. format_value(self.values[k], self.formats[k])
      seen[k] = true
    end
  end
  local rest = {}
  for k in pairs(self.values) do
    if not seen[k] then rest[#rest + 1] = tostring(k) end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do
    parts[#parts + 1] = k .. sep .. format_value(self.values[k], self.formats[k])
  end
  return table.concat(parts, "  ")
end

local function count_text(self)
  if self.total then
    local pct = self.total > 0 and 100 * self.count / self.total or 100
    local w = #tostring(self.total)
    return string.format("%" .. w .. "d/%d (%3.0f%%)", self.count, self.total, pct)
  end
  return tostring(self.count)
end

--- bar:line(final) -> the plain text line for the current state (what a log shows).
function Bar:line(final)
  local parts = {}
  if self.label ~= "" then parts[#parts + 1] = self.label end
  parts[#parts + 1] = count_text(self)
  parts[#parts + 1] = format_rate(self:rate(), self.unit)
  parts[#parts + 1] = "elapsed " .. M.format_time(self:elapsed())
  if final then
    parts[#parts + 1] = "done"
  elseif self.total or self.time_limit then
    parts[#parts + 1] = "ETA " .. M.format_time(self:eta())
  end
  local f = field_text(self, " ")
  if f ~= "" then parts[#parts + 1] = f end
  return table.concat(parts, "  ")
end

-- the terminal line: a bar, then the same facts in compact form
local function tty_line(self, final)
  local parts = {}
  if self.label ~= "" then parts[#parts + 1] = self.label end
  if self.total then
    local frac = self.total > 0 and math.min(1, self.count / self.total) or 1
    local fill = math.floor(frac * BAR_WIDTH + 0.5)
    parts[#parts + 1] = "[" .. string.rep("#", fill) .. string.rep(".", BAR_WIDTH - fill) .. "]"
  end
  parts[#parts + 1] = count_text(self)
  parts[#parts + 1] = format_rate(self:rate(), self.unit)
  local times = M.format_time(self:elapsed())
  if not final and (self.total or self.time_limit) then
    times = times .. "<" .. M.format_time(self:eta())
  end
  parts[#parts + 1] = times
  local f = field_text(self, "=")
  if f ~= "" then parts[#parts + 1] = f end
  local s = table.concat(parts, "  ")
  local cols = tonumber(os.getenv("COLUMNS") or "")
  if cols and cols > 10 and #s > cols - 1 then s = s:sub(1, cols - 1) end
  return s
end

local function draw(self, final)
  local s = tty_line(self, final)
  local pad = self.width > #s and string.rep(" ", self.width - #s) or ""
  self.out:write("\r", s, pad)
  if final then self.out:write("\n") end
  self.out:flush()
  self.width = final and 0 or #s
end

local function merge(self, fields)
  if fields == nil then return end
  if type(fields) ~= "table" then
    error("progress.Bar:update: fields must be a table {name = value}, got " .. type(fields), 3)
  end
  for k, v in pairs(fields) do self.values[k] = v end
end

-- show the state if it is time to: terminal at most every `refresh` s (and at the end),
-- plain when the count crossed a multiple of `every` or `interval` s have passed
local function maybe_show(self)
  local now = self.clock()
  if self.tty then
    local last = self.last_draw
    if last == nil or now - last >= self.refresh or (self.total and self.count >= self.total) then
      self.last_draw = now
      draw(self, false)
    end
    return
  end
  local show = self.last_count == nil
  if not show and self.every then
    show = self.count // self.every > self.last_count // self.every
  end
  if not show and self.interval and now - self.last_draw >= self.interval then show = true end
  if show then
    self.last_draw, self.last_count = now, self.count
    self.out:write(self:line(false), "\n")
    self.out:flush()
  end
end

--- bar:update(n, fields) sets the count to n (absolute, like xlua.progress(i, N)) and
-- merges `fields` ({loss = 0.41, acc = 0.9}; they persist until changed), then shows the
-- line if it is time to.  Returns the bar.
function Bar:update(n, fields)
  if type(n) ~= "number" or n ~= n then
    error("progress.Bar:update: count must be a number, got " .. tostring(n), 2)
  end
  if self.done then error("progress.Bar:update: the bar is finished", 2) end
  merge(self, fields)
  self.count = n
  maybe_show(self)
  return self
end

--- bar:advance(k, fields): adds k (default 1) to the count, as tqdm's update(k).
function Bar:advance(k, fields)
  k = k or 1
  if type(k) ~= "number" then
    error("progress.Bar:advance: step must be a number, got " .. tostring(k), 2)
  end
  if self.done then error("progress.Bar:advance: the bar is finished", 2) end
  merge(self, fields)
  self.count = self.count + k
  maybe_show(self)
  return self
end

--- bar:show() shows the current state now (a plain line unless the last one already had
-- this count; a terminal redraw), whatever the schedule -- at the end of an epoch, say.
function Bar:show()
  if self.done then return self end
  if self.tty then
    self.last_draw = self.clock()
    draw(self, false)
  elseif self.last_count ~= self.count then
    self.last_draw, self.last_count = self.clock(), self.count
    self.out:write(self:line(false), "\n")
    self.out:flush()
  end
  return self
end

--- bar:set(fields): changes fields without moving the count or printing.
function Bar:set(fields)
  merge(self, fields)
  return self
end

--- bar:print(...) writes a message line (tab-separated, like print) without garbling the
-- bar: on a terminal the bar line is cleared first and redrawn after.
function Bar:print(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  local msg = table.concat(parts, "\t")
  if self.tty and self.width > 0 then
    self.out:write("\r", string.rep(" ", self.width), "\r", msg, "\n")
    self.width = 0
    if not self.done then draw(self, false) end
  else
    self.out:write(msg, "\n")
  end
  self.out:flush()
end

--- bar:finish(fields) prints the final line (count, rate, elapsed, fields) and ends the
-- bar; a second call does nothing.  Returns the elapsed seconds.
function Bar:finish(fields)
  if self.done then return self:elapsed() end
  merge(self, fields)
  self:pause()
  if self.tty then
    draw(self, true)
  else
    self.out:write(self:line(true), "\n")
    self.out:flush()
  end
  self.done = true
  return self:elapsed()
end

Bar.__close = function(self) self:finish() end

-- ---------------------------------------------------------------------------------------
-- iterator

--- progress.range(n, opts) -> iterator over 1..n that also yields the bar:
--   for i, bar in glimpse.progress.range(100, {label = "eval"}) do ... bar:set{acc = a} end
-- The count becomes i - 1 when item i starts (items before it are done) and the bar is
-- finished when the loop runs out; opts are progress.Bar's (total is n).
function M.range(n, opts)
  if type(n) ~= "number" or n < 0 or n % 1 ~= 0 then
    error("progress.range: n must be a non-negative integer, got " .. tostring(n), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("progress.range: opts must be a table, got " .. type(opts), 2)
  end
  n = math.tointeger(n)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.total = n > 0 and n or nil
  local bar = M.Bar(o)
  local i = 0
  return function()
    if i >= n then
      if not bar.done then bar.count = n; bar:finish() end
      return nil
    end
    if i > 0 then bar:update(i) end
    i = i + 1
    return i, bar
  end
end

return M
