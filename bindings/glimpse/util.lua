-- glimpse.util -- the small helpers experiment scripts kept writing for themselves:
-- atomic text and JSON files, mkdir -p, an output folder that records how it was made,
-- a pausable timer, and a few facts about the process and the machine (resident memory,
-- load average) that results files report.
--
-- Atomic writes go to "<path>.tmp.<pid>.<n>" in the same folder and are renamed over
-- <path>, so a reader (or a crash) never sees half a file and an existing file survives a
-- failed write.  Lua cannot fsync: the rename is atomic for other processes, not against
-- power loss.  JSON goes through lua-cjson (Debian package lua-cjson) for decoding and for
-- escaping strings; the layout (sorted keys, optional indentation, shortest round-trip
-- numbers, NaN/inf as null) is done here so the same results give the same bytes.
local glimpse = require "glimpse"
local check = require "glimpse.check"

local M = {}

local fail = check.fail

local cjson_mod, cjson_err
local function cjson(fname)
  if cjson_mod then return cjson_mod end
  local ok, mod = pcall(require, "cjson")
  if not ok then
    cjson_err = cjson_err or tostring(mod)
    fail(3, "%s: JSON needs lua-cjson (Debian package lua-cjson; require \"cjson\" failed: %s)",
         fname, cjson_err:match("^[^\n]*"))
  end
  cjson_mod = mod
  return mod
end

-- ---------------------------------------------------------------------------------------
-- process facts

local pid_cache
--- util.pid() -> this process's id (from /proc/self/stat), or nil where there is no /proc.
function M.pid()
  if pid_cache == nil then
    local f = io.open("/proc/self/stat")
    local s = f and f:read("l")
    if f then f:close() end
    pid_cache = s and math.tointeger(tonumber(s:match("^(%d+)"))) or false
  end
  return pid_cache or nil
end

local function proc_status_kb(field)
  local f = io.open("/proc/self/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return math.tointeger(tonumber(s:match(field .. ":%s*(%d+)")))
end

--- util.rss_kb() -> resident set size of this process in kB (VmRSS), or nil.
function M.rss_kb() return proc_status_kb("VmRSS") end

--- util.peak_rss_kb() -> peak resident set size in kB (VmHWM), or nil.
function M.peak_rss_kb() return proc_status_kb("VmHWM") end

--- util.loadavg() -> the first line of /proc/loadavg ("1.02 0.87 0.60 2/311 4242"), or nil.
function M.loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return nil end
  local s = f:read("l")
  f:close()
  return s
end

--- util.shell_quote(s) -> s quoted for a POSIX shell ('it''s' style).
function M.shell_quote(s)
  s = tostring(s)
  if s:match("^[%w%._/=:,+-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- util.command_line() -> the command that started this script, shell-quoted, from the
-- global `arg` ("glimpse scripts/seq2seq.lua --quick"), or nil outside a script.
function M.command_line()
  local a = rawget(_G, "arg")
  if type(a) ~= "table" or a[0] == nil then return nil end
  local parts = {}
  local lo = 0
  while a[lo - 1] ~= nil do lo = lo - 1 end
  for i = lo, #a do parts[#parts + 1] = M.shell_quote(a[i]) end
  return table.concat(parts, " ")
end

-- ---------------------------------------------------------------------------------------
-- files

--- util.is_dir(path) -> true when path names a directory.
function M.is_dir(path)
  return type(path) == "string" and glimpse._file_kind(path) == "directory"
end

--- util.exists(path) -> true when path names something that can be opened for reading.
function M.exists(path)
  return type(path) == "string" and glimpse._file_kind(path) ~= nil
end

--- util.mkdir_p(path) creates a directory and its missing parents (like mkdir -p);
-- an existing directory is fine.  Returns path; raises an error naming it otherwise.
function M.mkdir_p(path)
  if type(path) ~= "string" or path == "" then
    fail(2, "util.mkdir_p: path must be a non-empty string, got %s", tostring(path))
  end
  if M.is_dir(path) then return path end
  local p = io.popen("mkdir -p -- " .. M.shell_quote(path) .. " 2>&1")
  local msg = p:read("a")
  p:close()
  if not M.is_dir(path) then
    fail(2, "util.mkdir_p: cannot create directory '%s'%s", path,
         msg ~= "" and (": " .. msg:gsub("%s+$", "")) or "")
  end
  return path
end

--- util.read_text(path) -> the whole file as a string; a clear error when it cannot be read.
function M.read_text(path)
  if type(path) ~= "string" then fail(2, "util.read_text: path must be a string, got %s", type(path)) end
  local f, err = io.open(path, "rb")
  if not f then fail(2, "util.read_text: %s", err) end
  local s, rerr = f:read("a")
  f:close()
  if not s then fail(2, "util.read_text: %s: %s", path, tostring(rerr)) end
  return s
end

local tmp_counter = 0

local function atomic_write(path, s, fname, level)
  if type(path) ~= "string" or path == "" then
    fail(level + 1, "%s: path must be a non-empty string, got %s", fname, tostring(path))
  end
  tmp_counter = tmp_counter + 1
  local tmp = string.format("%s.tmp.%s.%d", path, tostring(M.pid() or os.time()), tmp_counter)
  local f, err = io.open(tmp, "wb")
  if not f then fail(level + 1, "%s: cannot write %s (%s)", fname, path, err) end
  local ok, werr = f:write(s)
  if ok then ok, werr = f:flush() end
  f:close()
  if ok then ok, werr = os.rename(tmp, path) end
  if not ok then
    os.remove(tmp)
    fail(level + 1, "%s: cannot write %s (%s)", fname, path, tostring(werr))
  end
  return path
end

--- util.write_text(path, s) writes s to path atomically (temp file + rename).  Returns path.
function M.write_text(path, s)
  if type(s) ~= "string" and type(s) ~= "number" then
    fail(2, "util.write_text: text must be a string, got %s", type(s))
  end
  atomic_write(path, tostring(s), "util.write_text", 2)
  return path      -- not a tail call: the error level counts this frame
end

--- util.write_lines(path, lines) writes an array of strings, one per line, atomically.
function M.write_lines(path, lines)
  if type(lines) ~= "table" then
    fail(2, "util.write_lines: lines must be an array of strings, got %s", type(lines))
  end
  local parts = {}
  for i, l in ipairs(lines) do parts[i] = tostring(l) end
  atomic_write(path, table.concat(parts, "\n") .. (#parts > 0 and "\n" or ""),
               "util.write_lines", 2)
  return path
end

-- ---------------------------------------------------------------------------------------
-- JSON

-- a JSON string literal: lua-cjson's escaping, without its "\/" for "/" (lua-cjson 2.1.0
-- cannot turn that off; every "/" it writes is escaped, so "\/" never means anything else)
local function string_text(cj, s)
  return (cj.encode(s):gsub("\\/", "/"))
end

-- shortest decimal that reads back as the same double
local function number_text(x)
  if x ~= x or x == math.huge or x == -math.huge then return "null" end
  if math.type(x) == "integer" then return tostring(x) end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%d", x) end
  for digits = 15, 17 do
    local s = string.format("%." .. digits .. "g", x)
    if tonumber(s) == x then return s end
  end
  return string.format("%.17g", x)
end

local function is_array(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
    count = count + 1
  end
  return count == n
end

local function encode(v, cj, indent, depth, path, seen, out)
  local tv = type(v)
  if v == nil or (cj.null ~= nil and v == cj.null) then out[#out + 1] = "null"
  elseif tv == "boolean" then out[#out + 1] = v and "true" or "false"
  elseif tv == "number" then out[#out + 1] = number_text(v)
  elseif tv == "string" then out[#out + 1] = string_text(cj, v)
  elseif glimpse.is_tensor(v) then
    local t = v:dim() == 0 and v:item() or v:totable()
    encode(t, cj, indent, depth, path, seen, out)
  elseif tv == "table" then
    if seen[v] then error({json = "a table that contains itself at " .. path}) end
    seen[v] = true
    local nl = indent and ("\n" .. string.rep(indent, depth + 1)) or ""
    local close = indent and ("\n" .. string.rep(indent, depth)) or ""
    if is_array(v) then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = nl
        encode(v[i], cj, indent, depth + 1, path .. "[" .. i .. "]", seen, out)
      end
      out[#out + 1] = close .. "]"
    else
      local keys = {}
      for k in pairs(v) do
        local tk = type(k)
        if tk ~= "string" and tk ~= "number" then
          error({json = string.format("a %s key at %s (JSON keys are strings)", tk, path)})
        end
        keys[#keys + 1] = k
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      if #keys == 0 then out[#out + 1] = "{}" else
        out[#out + 1] = "{"
        for i, k in ipairs(keys) do
          if i > 1 then out[#out + 1] = "," end
          local ks = type(k) == "number" and number_text(k) or k
          out[#out + 1] = nl .. string_text(cj, ks) .. (indent and ": " or ":")
          encode(v[k], cj, indent, depth + 1, path .. "." .. ks, seen, out)
        end
        out[#out + 1] = close .. "}"
      end
    end
    seen[v] = nil
  else
    error({json = string.format("a %s at %s cannot be written as JSON", tv, path)})
  end
end

--- util.json_encode(value, {indent=2}) -> JSON text.  Object keys are sorted (the same
-- value always gives the same bytes); numbers are the shortest text that reads back
-- exactly; NaN and infinities become null; tensors become nested arrays; an empty table
-- is {} (as lua-cjson).  indent: spaces per level (a number) or nil for one line.
function M.json_encode(value, opts)
  local cj = cjson("util.json_encode")
  if opts ~= nil and type(opts) ~= "table" then
    fail(2, "util.json_encode: opts must be a table or nil, got %s", type(opts))
  end
  local indent = opts and opts.indent
  if indent ~= nil then
    if type(indent) ~= "number" or indent < 0 then
      fail(2, "util.json_encode: indent must be a number of spaces, got %s", tostring(indent))
    end
    indent = string.rep(" ", indent)
  end
  local out = {}
  local ok, err = pcall(encode, value, cj, indent, 0, "value", {}, out)
  if not ok then
    fail(2, "util.json_encode: %s", type(err) == "table" and err.json or tostring(err))
  end
  return table.concat(out)
end

--- util.json_decode(text) -> value (lua-cjson; JSON null becomes cjson.null).
function M.json_decode(s)
  local cj = cjson("util.json_decode")
  if type(s) ~= "string" then fail(2, "util.json_decode: expected a string, got %s", type(s)) end
  local ok, v = pcall(cj.decode, s)
  if not ok then fail(2, "util.json_decode: %s", tostring(v)) end
  return v
end

--- util.write_json(path, value, {indent=2}) writes value as JSON atomically (with a final
-- newline).  Returns path.
function M.write_json(path, value, opts)
  local cj = cjson("util.write_json")
  local indent = opts and opts.indent
  if indent ~= nil and (type(indent) ~= "number" or indent < 0) then
    fail(2, "util.write_json: indent must be a number of spaces, got %s", tostring(indent))
  end
  local out = {}
  local ok, err = pcall(encode, value, cj, indent and string.rep(" ", indent), 0, "value", {}, out)
  if not ok then
    fail(2, "util.write_json: %s: %s", tostring(path), type(err) == "table" and err.json or tostring(err))
  end
  out[#out + 1] = "\n"
  atomic_write(path, table.concat(out), "util.write_json", 2)
  return path
end

--- util.read_json(path) -> the decoded value; errors name the file.
function M.read_json(path)
  local cj = cjson("util.read_json")
  if type(path) ~= "string" then fail(2, "util.read_json: path must be a string, got %s", type(path)) end
  local f, err = io.open(path, "rb")
  if not f then fail(2, "util.read_json: %s", err) end
  local s = f:read("a")
  f:close()
  local ok, v = pcall(cj.decode, s)
  if not ok then fail(2, "util.read_json: %s: %s", path, tostring(v)) end
  return v
end

-- ---------------------------------------------------------------------------------------
-- output folders

--- util.output_dir(path, config) creates the folder (mkdir -p) and writes path/run.json:
-- the command line that started the script, `config` (any JSON-able table), the glimpse
-- version, BLAS core and threads and the UTC start time, so a results folder says how to
-- make it again.  Returns path.
function M.output_dir(path, config)
  if type(path) ~= "string" or path == "" then
    fail(2, "util.output_dir: path must be a non-empty string, got %s", tostring(path))
  end
  if config ~= nil and type(config) ~= "table" then
    fail(2, "util.output_dir: config must be a table, got %s", type(config))
  end
  M.mkdir_p(path)
  local blas = glimpse.blas_info()
  local run = {command = M.command_line(), config = config or {}, glimpse = glimpse.version,
               lua = _VERSION, blas = {core = blas.core, threads = blas.threads},
               started = os.date("!%Y-%m-%dT%H:%M:%SZ")}
  M.write_json(path .. "/run.json", run, {indent = 2})
  return path
end

-- ---------------------------------------------------------------------------------------
-- command-line flags

--- util.int_flag(parser, name, v, lo) -> v as an integer; an argparse parser's error (usage
-- and exit) naming --name unless v is a whole number >= lo.  argparse's tonumber gives floats.
function M.int_flag(parser, name, v, lo)
  if type(v) == "number" and v % 1 == 0 then v = math.tointeger(v) end
  if math.type(v) ~= "integer" or v < lo then
    parser:error(string.format("--%s must be an integer >= %d, got %s", name, lo, tostring(v)))
  end
  return v
end

-- ---------------------------------------------------------------------------------------
-- timing

local Timer = {}
Timer.__index = Timer

--- util.Timer(clock) -> a running timer (clock: a function returning seconds, default
-- glimpse.clock).  timer:elapsed() seconds so far, not counting paused time;
-- timer:pause(), timer:resume(), timer:reset() (running again from 0).
function M.Timer(clock)
  if clock ~= nil and type(clock) ~= "function" then
    fail(2, "util.Timer: clock must be a function returning seconds, got %s", type(clock))
  end
  local t = setmetatable({clock = clock or glimpse.clock}, Timer)
  return t:reset()
end

function Timer:reset()
  self.t0, self.paused_at = self.clock(), nil
  return self
end

function Timer:elapsed()
  return (self.paused_at or self.clock()) - self.t0
end

function Timer:pause()
  if not self.paused_at then self.paused_at = self.clock() end
  return self
end

function Timer:resume()
  if self.paused_at then
    self.t0 = self.t0 + (self.clock() - self.paused_at)
    self.paused_at = nil
  end
  return self
end

-- the Timer methods, shared with objects that keep the same t0 / paused_at / clock fields
-- (glimpse.progress bars pause and resume this way)
M.timer_methods = Timer

--- util.time(fn, ...) -> seconds, fn's results: one timed call.
function M.time(fn, ...)
  if type(fn) ~= "function" then fail(2, "util.time: expected a function, got %s", type(fn)) end
  local t0 = glimpse.clock()
  local r = table.pack(fn(...))
  return glimpse.clock() - t0, table.unpack(r, 1, r.n)
end

return M
