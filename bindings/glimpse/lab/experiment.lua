--- glimpse.experiment -- what every experiment script does around its model: the common
-- flags, seeding, threads, the output folder, the configuration header, run.json (how
-- the results were made, on what machine), metrics.json and the HTML report.
--
--   local parser = experiment.parser("seq2seq", "Train a seq2seq model.",
--                                    {steps = 4000, eval_every = 250, quick = {steps = 300}})
--   experiment.add_flags(parser, {batch = 64, lr = 3e-3})     -- or a spec's options as flags
--   local args = experiment.parse(parser)
--   local run = experiment.start(args, {name = "seq2seq", config = cfg})
--   ... run:write_run_json(); run:write_metrics({accuracy = acc, history = history})
--
-- The command line (parser, add_flags, parse, ...) is glimpse.lab.flags, published here;
-- --config FILE is a Lua file of flag values between the defaults and the command line.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local util = require "glimpse.util"
local dist = require "glimpse.lab.dist"
local flags = require "glimpse.lab.flags"

local M = {}

local fail = check.fail

for _, k in ipairs({"parser", "add_flags", "int_flags", "parse", "int_list"}) do
  M[k] = flags[k]
end

-- ---------------------------------------------------------------------------------------
-- the machine

local function source_commit()
  local path = package.searchpath("glimpse.lab.experiment", package.path)
  local root = path and path:match("^(.*)/bindings/glimpse/lab/experiment%.lua$")
  if not root or not util.is_dir(root .. "/.git") and not util.exists(root .. "/.git") then
    return nil
  end
  local p = io.popen("git -C " .. util.shell_quote(root) .. " rev-parse --short HEAD 2>/dev/null")
  local s = p and p:read("l")
  if p then p:close() end
  return s ~= "" and s or nil
end

--- experiment.machine() -> {cpu=, cores=, loadavg=, blas={core=, threads=, config=},
--- glimpse=, commit=, lua=}: the facts run.json records.
function M.machine()
  local ok, info = pcall(util.read_text, "/proc/cpuinfo")
  if not ok then info = "" end
  local cores = 0
  for _ in info:gmatch("\nprocessor%s*:") do cores = cores + 1 end
  if info:match("^processor%s*:") then cores = cores + 1 end
  local blas = glimpse.blas_info()
  return {cpu = info:match("model name%s*:%s*([^\n]+)"), cores = cores > 0 and cores or nil,
          loadavg = util.loadavg(), blas = {core = blas.core, threads = blas.threads,
                                            config = blas.config},
          glimpse = glimpse.version, commit = source_commit(), lua = _VERSION}
end

-- ---------------------------------------------------------------------------------------
-- the run

local Run = {}
Run.__index = Run

local function value_text(v)
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return string.format("%g", v)
  end
  if type(v) == "table" then
    local ok, s = pcall(util.json_encode, v)
    return ok and s or tostring(v)
  end
  return tostring(v)
end

local function pairs_text(t)
  local keys = {}
  for k, v in pairs(t) do
    if type(v) ~= "function" and type(v) ~= "userdata" then keys[#keys + 1] = tostring(k) end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. value_text(t[k]) end
  return table.concat(parts, " ")
end

-- the flags as plain values (argparse results hold only strings, numbers, booleans, tables)
local function plain(t)
  local out = {}
  for k, v in pairs(t) do
    local tv = type(v)
    if tv == "string" or tv == "number" or tv == "boolean" then out[k] = v
    elseif tv == "table" then out[k] = plain(v) end
  end
  return out
end

--- experiment.start(args, {name=, config=, out=, quiet=false}) -> run.  Seeds glimpse
--- (glimpse.manual_seed(args.seed)), sets the threads (args.threads > 0; 1 per rank under --distributed), creates the
--- output folder (args.out, or opts.out, or out/<name>) and prints the configuration
--- header: the flags and the model config.
function M.start(args, opts)
  if type(args) ~= "table" then fail(2, "experiment.start: args must be the table from parse, got %s", type(args)) end
  opts = opts or {}
  if type(opts) ~= "table" then fail(2, "experiment.start: options must be a table, got %s", type(opts)) end
  local name = opts.name or "experiment"
  if type(name) ~= "string" then fail(2, "experiment.start: name must be a string") end
  if opts.config ~= nil and type(opts.config) ~= "table" then
    fail(2, "experiment.start: config must be a table, got %s", type(opts.config))
  end
  local seed = args.seed or 1
  if math.type(seed) ~= "integer" then
    if type(seed) == "number" and seed % 1 == 0 then seed = math.tointeger(seed)
    else fail(2, "experiment.start: args.seed must be an integer, got %s", tostring(seed)) end
  end
  glimpse.manual_seed(seed)
  if args.distributed then dist.init() end       -- rank 0 alone prints and writes
  -- threads 0 keeps glimpse's own count (every core, or GLIMPSE_THREADS): results are the
  -- same bits on any count; ranks of one mpirun share the cores, so each takes one
  if args.threads and args.threads > 0 then glimpse.set_num_threads(math.tointeger(args.threads))
  elseif args.distributed and dist.size() > 1 then glimpse.set_num_threads(1) end
  local dir = args.out or opts.out or ("out/" .. name)
  util.mkdir_p(dir)
  local run = setmetatable({name = name, args = args, config = opts.config or {}, dir = dir,
                            seed = seed, quiet = opts.quiet or not dist.is_root(),
                            started = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                            timer = util.Timer()}, Run)
  run:print(string.format("%s: %s", name, pairs_text(plain(args))))
  if next(run.config) then run:print(string.format("  config: %s", pairs_text(run.config))) end
  run:print(string.format("  threads %d, output %s", glimpse.get_num_threads(), dir))
  return run
end

--- run:print(...) prints like print unless the run is quiet.
function Run:print(...)
  if not self.quiet then print(...) end
end

--- run:is_root() -> true on rank 0 of a data-parallel run (--distributed), and always when
--- the script runs alone.  Scripts stop the other ranks after training with
--- `if not run:is_root() then return end`: rank 0 alone evaluates, prints and writes.
function Run:is_root()
  return dist.is_root()
end

--- run:path(name) -> "<output folder>/<name>".
function Run:path(name)
  if type(name) ~= "string" or name == "" then
    fail(2, "run:path: name must be a non-empty string, got %s", tostring(name))
  end
  return self.dir .. "/" .. name
end

--- experiment.count_params(model) -> the number of numbers in model:parameters() (or in
--- an array of tensors).
function M.count_params(model)
  local params = model
  if type(model) == "table" and type(model.parameters) == "function" then params = model:parameters() end
  if type(params) ~= "table" then
    fail(2, "experiment.count_params: expected a module or an array of tensors, got %s", type(model))
  end
  local n = 0
  for i, p in ipairs(params) do
    if not glimpse.is_tensor(p) then
      fail(2, "experiment.count_params: entry %d is a %s, expected a tensor", i, type(p))
    end
    n = n + p:numel()
  end
  return n
end

--- run:count_params(model) -> n: counts the parameters, prints "<name>: N parameters" and
--- keeps the count for run.json and metrics.json (field params).
function Run:count_params(model)
  local n = M.count_params(model)
  self.params = n
  self:print(string.format("%s: %d parameters", self.name, n))
  return n
end

--- run:trainer_options([extra]) -> {seed=, steps=, time_limit=, log_every=, eval_every=}
--- from the flags, with extra's entries added: the options a glimpse.train.Trainer takes.
--- eval_every comes along only when extra has an evaluate function.
function Run:trainer_options(extra)
  if extra ~= nil and type(extra) ~= "table" then
    fail(2, "run:trainer_options: extra must be a table, got %s", type(extra))
  end
  local a = self.args
  local o = {seed = self.seed, steps = a.steps, time_limit = a.time_limit,
             log_every = a.log_every}
  extra = extra or {}
  if a.distributed then o.distributed = true end
  if extra.evaluate then o.eval_every = a.eval_every end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

--- run:check_load(model, wanted, keys) -> model: a model read with --load against the flags
--- the user set (on the command line or in --config).  model.config: the checkpoint's model
--- config; wanted: the config those flags would build; keys: config key -> flag target
--- (default: every key of wanted, each set by the flag of the same name).  A flag set to
--- another value than the checkpoint holds is an error naming both, so --load never
--- ignores an architecture flag without a word.
function Run:check_load(model, wanted, keys)
  local loaded = type(model) == "table" and model.config
  if type(loaded) ~= "table" or type(wanted) ~= "table" then
    fail(2, "run:check_load: expected a loaded model (with .config) and the wanted config, got %s and %s",
         type(model), type(wanted))
  end
  if keys ~= nil and type(keys) ~= "table" then
    fail(2, "run:check_load: keys must be a table {config key = flag target}, got %s", type(keys))
  end
  local chosen = flags.chosen(self.args)
  local list = {}
  for k in pairs(keys or wanted) do list[#list + 1] = k end
  table.sort(list)
  for _, k in ipairs(list) do
    local flag = keys and keys[k] or k
    local want, have = wanted[k], loaded[k]
    local scalar = type(want) == "number" or type(want) == "string" or type(want) == "boolean"
    if chosen[flag] and scalar and have ~= nil and want ~= have then
      fail(2, "%s: --%s %s does not match the checkpoint %s (%s %s): drop the flag, or --load " ..
           "the checkpoint made with it", self.name, flag:gsub("_", "-"), tostring(want),
           tostring(self.args.load), k, tostring(have))
    end
  end
  return model
end

--- run:seconds() -> seconds since experiment.start.
function Run:seconds()
  return self.timer:elapsed()
end

--- run:write_run_json([extra]) writes <out>/run.json: name, command, config = {args=flags,
--- model=config}, glimpse version and commit, lua, blas = {core, threads}, machine = {cpu,
--- cores, loadavg, blas}, started (UTC), seed, params (after count_params); extra's entries
--- are added on top.  Returns the path.
function Run:write_run_json(extra)
  if extra ~= nil and type(extra) ~= "table" then
    fail(2, "run:write_run_json: extra must be a table, got %s", type(extra))
  end
  local m = M.machine()
  local doc = {name = self.name, command = util.command_line(),
               config = {args = plain(self.args), model = self.config},
               glimpse = m.glimpse, commit = m.commit, lua = m.lua,
               blas = {core = m.blas.core, threads = m.blas.threads},
               machine = {cpu = m.cpu, cores = m.cores, loadavg = m.loadavg, blas = m.blas},
               started = self.started, seed = self.seed, params = self.params}
  if self.args.distributed then doc.ranks = dist.size() end
  for k, v in pairs(extra or {}) do doc[k] = v end
  if not dist.is_root() then return self:path("run.json") end
  return util.write_json(self:path("run.json"), doc, {indent = 2})
end

--- run:write_metrics(tbl [, file]) writes tbl to <out>/metrics.json (or <out>/<file>)
--- atomically (indent 2), adding threads (the thread count) and params (after count_params)
--- when tbl has none.  Returns the path.
function Run:write_metrics(tbl, file)
  if type(tbl) ~= "table" then fail(2, "run:write_metrics: expected a table, got %s", type(tbl)) end
  if file ~= nil and (type(file) ~= "string" or file == "") then
    fail(2, "run:write_metrics: file must be a file name, got %s", tostring(file))
  end
  local doc = {}
  for k, v in pairs(tbl) do doc[k] = v end
  if doc.threads == nil then doc.threads = glimpse.get_num_threads() end
  if doc.params == nil then doc.params = self.params end
  if not dist.is_root() then return self:path(file or "metrics.json") end
  return util.write_json(self:path(file or "metrics.json"), doc, {indent = 2})
end

--- run:write_report{title=, summary=, history=, charts=, tables=, images=} writes
--- <out>/index.html (glimpse.report) and returns its path: a table of the flags, the
--- summary (name -> number or text: the final results), a learning curve of the training
--- loss (history = a Trainer's history) and one chart per metric named in charts (from
--- history.evals), then each of tables ({caption=, rows=, header=true}) and a strip of the
--- pictures in images (file names in the output folder).  attention: attention viewers
--- above the pictures: a list of page:attention's data tables (each titled by its title
--- field), or a function(page) that adds them.
function Run:write_report(o)
  if type(o) ~= "table" then fail(2, "run:write_report: expected an options table, got %s", type(o)) end
  local report = require "glimpse.lab.report"
  local page = report.Page{title = o.title or self.name}
  local function kv(t)
    local keys, rows = {}, {}
    for k, v in pairs(t) do
      if type(v) ~= "table" and type(v) ~= "function" then keys[#keys + 1] = tostring(k) end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do rows[#rows + 1] = {k, t[k]} end
    return rows
  end
  if o.summary then
    page:heading("Results")
    page:table(kv(o.summary), {columns = nil})
  end
  local h = o.history
  if h and h.losses and #h.losses > 1 then
    local pts = {}
    for _, e in ipairs(h.losses) do pts[#pts + 1] = {e.step, e.loss} end
    page:heading("Training loss")
    page:chart({{name = "train loss", points = pts}}, {xlabel = "step", ylabel = "loss"})
  end
  for _, metric in ipairs(o.charts or {}) do
    local pts = {}
    for _, e in ipairs(h and h.evals or {}) do
      if type(e[metric]) == "number" then pts[#pts + 1] = {e.step, e[metric]} end
    end
    if #pts > 1 then
      page:heading(metric)
      page:chart({{name = metric, points = pts}}, {xlabel = "step", ylabel = metric})
    end
  end
  for _, t in ipairs(o.tables or {}) do
    page:table(t.rows, {header = t.header ~= false, caption = t.caption})
  end
  if o.attention then
    page:heading("Attention")
    if type(o.attention) == "function" then o.attention(page) else
      for _, d in ipairs(o.attention) do page:attention(d) end
    end
  end
  if o.images and #o.images > 0 then
    page:heading("Pictures")
    page:images(o.images, {width = 600})
  end
  page:heading("Flags")
  page:table(kv(plain(self.args)))
  return page:write(self:path("index.html"))
end

return M
