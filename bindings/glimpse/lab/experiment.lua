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
-- Flags come from lua-argparse.  --config FILE is a Lua file returning flag values; they
-- replace the defaults, and flags given on the command line replace both.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local dist = require "glimpse.lab.dist"

local M = {}

local fail = check.fail

-- args (experiment.parse's result) -> the flags the user set: on the command line or in
-- --config (not the defaults, not --quick's values)
local CHOSEN = setmetatable({}, {__mode = "k"})

-- the common flags: name, help, default key, integer lower bound (nil: a number)
local COMMON = {
  {"--seed", "random seed", "seed", 0},
  {"--threads", "threads for the engine and OpenBLAS (0: every core, or GLIMPSE_THREADS)",
   "threads", 0},
  {"--steps", "training steps (the step budget ends a run)", "steps", 0},
  {"--time-limit", "most training seconds (a guard; results come from the step budget)",
   "time_limit"},
  {"--eval-every", "steps between evaluations", "eval_every", 1},
  {"--log-every", "steps between progress lines", "log_every", 1},
}
local DEFAULTS = {seed = 1, threads = 0, steps = 1000, time_limit = 3600, eval_every = 250,
                  log_every = 50}
local KNOWN_DEFAULTS = {seed = true, threads = true, steps = true, time_limit = true,
                        eval_every = true, log_every = true, out = true, quick = true}

--- experiment.parser(name, description, defaults) -> an argparse parser with the common
--- flags: --seed, --threads, --out, --quick, --steps, --time-limit, --config, --eval-every,
--- --log-every, --distributed.  defaults: {seed=1, threads=0, steps=1000, time_limit=3600,
--- eval_every=250, log_every=50, out="out/<name>", quick={flag = value, ...}} where `quick`
--- holds the values --quick puts in place (unless given on the command line).  steps = false:
--- --steps has no default (args.steps is nil unless given; the script decides).  Add the
--- script's own options to the parser, then call experiment.parse(parser).
function M.parser(name, description, defaults)
  if type(name) ~= "string" or name == "" then
    fail(2, "experiment.parser: name must be a non-empty string, got %s", tostring(name))
  end
  if description ~= nil and type(description) ~= "string" then
    fail(2, "experiment.parser: description must be a string, got %s", type(description))
  end
  defaults = defaults or {}
  if type(defaults) ~= "table" then
    fail(2, "experiment.parser: defaults must be a table, got %s", type(defaults))
  end
  for k in pairs(defaults) do
    if not KNOWN_DEFAULTS[k] then
      fail(2, "experiment.parser: unknown default '%s' (known: seed, threads, steps, time_limit, "
           .. "eval_every, log_every, out, quick)", tostring(k))
    end
  end
  if defaults.quick ~= nil and type(defaults.quick) ~= "table" then
    fail(2, "experiment.parser: defaults.quick must be a table of flag values")
  end
  local argparse = require "argparse"
  local parser = argparse(name, description)
  for _, c in ipairs(COMMON) do
    local key = c[3]
    local d = defaults[key]
    if d == nil then d = DEFAULTS[key] end
    parser:option(c[1], c[2], d ~= false and tostring(d) or nil):convert(tonumber)
  end
  local out_default = defaults.out
  if out_default == nil then out_default = "out/" .. name end
  parser:option("--out", "output folder" .. (out_default and "" or " (default: made from the flags)"),
                out_default or nil)
  parser:flag("--quick", "a short run (a demo or a smoke test)")
  parser:flag("--distributed", "data-parallel training over the ranks of mpirun or srun "
              .. "(docs/distributed.md)")
  parser:option("--config", "a Lua file returning a table of flag values ({lr = 0.01, ...})")
  rawset(parser, "_glimpse_quick", defaults.quick or {})
  rawset(parser, "_glimpse_no_steps", defaults.steps == false)
  rawset(parser, "_glimpse_name", name)
  rawset(parser, "_glimpse_ints", {})
  rawset(parser, "_glimpse_specs", {})
  return parser
end

-- the flags several experiments share: key -> flag, help, kind ("int" >= 1, "int0" >= 0,
-- "number", "string")
local SHARED = {
  batch = {"--batch", "batch size", "int"},
  emb = {"--emb", "embedding size", "int"},
  hidden = {"--hidden", "hidden size", "int"},
  attn_hidden = {"--attn-hidden", "attention hidden size", "int"},
  layers = {"--layers", "recurrent layers", "int"},
  lr = {"--lr", "learning rate", "number"},
  clip = {"--clip", "gradient clip", "number"},
  beam = {"--beam", "beam width of the final decoding (1: greedy only)", "int"},
  load = {"--load", "start from a model.safetensors this script wrote (--steps 0: evaluate only)",
          "string"},
}
local SHARED_ORDER = {"batch", "emb", "hidden", "attn_hidden", "layers", "lr", "clip", "beam",
                      "load"}

--- experiment.add_flags(parser, values) -> parser: adds the flags experiments share, those
--- named in values: batch, emb, hidden, attn_hidden, layers, beam (positive integers), lr,
--- clip (numbers), load (a path).  values[key] is the default, false for none, or a table
--- {default, help} that replaces the standard help text.  experiment.parse checks the
--- integer ones.
--- experiment.add_flags(parser, spec, names [, overrides]) -> parser: a flag for each named
--- option of a glimpse.options spec (all when names is nil; Class.options), as
--- spec:add_flags makes it; experiment.parse checks the values against the spec.
function M.add_flags(parser, values, names, overrides)
  if type(parser) ~= "table" or rawget(parser, "_glimpse_ints") == nil then
    fail(2, "experiment.add_flags: expected a parser from experiment.parser")
  end
  if getmetatable(values) == options.Spec then
    if names ~= nil and type(names) ~= "table" then
      fail(2, "experiment.add_flags: names must be a list of option names, got %s", type(names))
    end
    local ok, err = pcall(values.add_flags, values, parser, names, overrides)
    if not ok then fail(2, "experiment.add_flags: %s", check.strip(err)) end
    local specs = parser._glimpse_specs
    specs[#specs + 1] = {values, names or values.names}
    return parser
  end
  if type(values) ~= "table" then fail(2, "experiment.add_flags: values must be a table") end
  for k in pairs(values) do
    if not SHARED[k] then
      local near = check.nearest(tostring(k), SHARED_ORDER)
      fail(2, "experiment.add_flags: unknown flag '%s' (%sknown: %s)", tostring(k),
           near and string.format("did you mean '%s'? ", near) or "",
           table.concat(SHARED_ORDER, ", "))
    end
  end
  for _, key in ipairs(SHARED_ORDER) do
    local v = values[key]
    if v ~= nil then
      local flag, help, kind = table.unpack(SHARED[key])
      if type(v) == "table" then v, help = v[1], v[2] or help end
      local o = parser:option(flag, help, v ~= false and v ~= nil and tostring(v) or nil)
      if kind ~= "string" then o:convert(tonumber) end
      if kind == "int" then parser._glimpse_ints[key] = {flag, 1} end
    end
  end
  return parser
end

--- experiment.int_flags(parser, {key = lower bound, ...}) -> parser: experiment.parse checks
--- that these flags (keys with underscores) are integers >= their bound (when given).
function M.int_flags(parser, bounds)
  if type(parser) ~= "table" or rawget(parser, "_glimpse_ints") == nil then
    fail(2, "experiment.int_flags: expected a parser from experiment.parser")
  end
  for k, lo in pairs(bounds) do
    parser._glimpse_ints[k] = {"--" .. k:gsub("_", "-"), lo}
  end
  return parser
end

-- the option targets the parser knows ("time_limit" for --time-limit), key -> true
local function targets(parser)
  local out = {}
  for _, o in ipairs(parser._options or {}) do
    local t = o._target or o:_get_default_target()
    if t then out[t] = true end
  end
  return out
end

-- target -> the argparse option that sets it
local function options_by_target(parser)
  local out = {}
  for _, o in ipairs(parser._options or {}) do
    local t = o._target or o:_get_default_target()
    if t then out[t] = o end
  end
  return out
end

-- a --config value checked as the command line would check the flag: a flag takes a
-- boolean, an option with choices one of them, a number option a number (a string is
-- converted as on the command line), another option a string (a number becomes its text);
-- the options of a glimpse.options spec are checked later by the spec.  Returns the value,
-- or nil and the reason.
local function config_value(opt, k, v, spec_names)
  if spec_names[k] or not opt then return v end
  local name = opt._name or ("--" .. k:gsub("_", "-"))
  if opt._maxargs == 0 then
    if (opt._maxcount or 1) > 1 and math.type(v) == "integer" and v >= 0 then return v end
    if type(v) ~= "boolean" then
      return nil, string.format("%s is a flag: its value must be true or false, got %s", name,
                                check.value(v))
    end
    return v
  end
  if type(v) == "table" and (opt._maxargs or 1) > 1 then return v end
  if type(v) ~= "string" and type(v) ~= "number" then
    return nil, string.format("%s takes %s, got %s", name, opt._convert and "a number" or "a string",
                              check.value(v))
  end
  if opt._convert and type(opt._convert) == "function" then
    if type(v) == "string" then
      local cv, err = opt._convert(v)
      if cv == nil then return nil, string.format("%s: %s", name, err or ("not a number: " .. check.value(v))) end
      v = cv
    end
    return v
  end
  if type(v) == "number" then v = tostring(math.tointeger(v) or v) end
  if opt._choices then
    for _, c in ipairs(opt._choices) do if c == v then return v end end
    return nil, string.format("%s must be one of %s, got %s", name, table.concat(opt._choices, ", "),
                              check.value(v))
  end
  return v
end

-- the targets named on the command line (explicit flags beat --config and --quick)
local function explicit(argv)
  local out = {}
  for _, a in ipairs(argv) do
    local name = type(a) == "string" and a:match("^%-%-([%w][%w%-]*)")
    if name then out[(name:gsub("%-", "_"))] = true end
  end
  return out
end

local function parse_error(parser, raise, msg)
  if raise then error("experiment.parse: " .. msg, 3) end
  parser:error(msg)
end

--- experiment.parse(parser [, argv [, {raise=false}]]) -> args.  Parses argv (default the
--- global arg), then applies --config FILE and --quick's values where no flag was given,
--- and checks that the common integer flags are whole numbers.  A problem prints the usage
--- and exits (argparse's way), or raises an error with raise = true.
function M.parse(parser, argv, opts)
  if type(parser) ~= "table" or type(parser.pparse) ~= "function" then
    fail(2, "experiment.parse: expected a parser from experiment.parser, got %s", type(parser))
  end
  argv = argv or rawget(_G, "arg") or {}
  local raise = opts and opts.raise
  local list = {}
  for i = 1, #argv do list[i] = argv[i] end
  local ok, args = parser:pparse(list)
  if not ok then return parse_error(parser, raise, args) end
  local given = explicit(list)
  local chosen = {}                 -- the flags the user set: on the command line or --config
  for k in pairs(given) do chosen[k] = true end
  local known = targets(parser)
  local by_target = options_by_target(parser)
  local spec_names = {}
  for _, sn in ipairs(rawget(parser, "_glimpse_specs") or {}) do
    for _, name in ipairs(sn[2]) do spec_names[name] = true end
  end
  local function apply(values, what, checked)
    local keys = {}
    for k in pairs(values) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local v = values[k]
      if type(k) ~= "string" or not known[k] then
        local names = {}
        for name in pairs(known) do names[#names + 1] = name end
        parse_error(parser, raise, string.format("%s: unknown flag '%s'%s", what, tostring(k),
                                                 check.did_you_mean(tostring(k), names)))
      end
      if checked then
        local cv, why = config_value(by_target[k], k, v, spec_names)
        if why then parse_error(parser, raise, string.format("%s: %s", what, why)) end
        v = cv
      end
      if not given[k] then args[k] = v end
    end
    if checked then
      for k in pairs(values) do chosen[k] = true end
    end
  end
  if args.config then
    local chunk, err = loadfile(args.config, "t", {math = math, string = string})
    if not chunk then parse_error(parser, raise, "--config: " .. tostring(err)) end
    local cok, values = pcall(chunk)
    if not cok or type(values) ~= "table" then
      parse_error(parser, raise, string.format("--config %s must return a table of flag values%s",
                                               args.config, cok and "" or (": " .. tostring(values))))
    end
    apply(values, "--config " .. args.config, true)
  end
  args.quick = args.quick or false
  if args.quick then apply(rawget(parser, "_glimpse_quick") or {}, "quick") end
  for _, c in ipairs(COMMON) do
    local key, lo = c[3], c[4]
    local v = args[key]
    if v == nil and key == "steps" and rawget(parser, "_glimpse_no_steps") then
      -- no default: the script decides the budget
    elseif lo then
      if type(v) == "number" and v % 1 == 0 then v = math.tointeger(v) end
      if math.type(v) ~= "integer" or v < lo then
        parse_error(parser, raise, string.format("%s must be an integer >= %d, got %s", c[1], lo,
                                                 tostring(args[key])))
      end
      args[key] = v
    elseif type(v) ~= "number" or not (v > 0) then
      parse_error(parser, raise, string.format("%s must be a positive number, got %s", c[1],
                                               tostring(v)))
    end
  end
  for key, c in pairs(rawget(parser, "_glimpse_ints") or {}) do
    local v = args[key]
    if v ~= nil then
      if type(v) == "number" and v % 1 == 0 then v = math.tointeger(v) end
      if math.type(v) ~= "integer" or v < c[2] then
        parse_error(parser, raise, string.format("%s must be an integer >= %d, got %s", c[1], c[2],
                                                 tostring(args[key])))
      end
      args[key] = v
    end
  end
  for _, sn in ipairs(rawget(parser, "_glimpse_specs") or {}) do
    local spec, names = sn[1], sn[2]
    for _, name in ipairs(names) do      -- a --config file's 8.0 is the integer 8
      local e = spec.by_name[name]
      if e.type:find("int", 1, true) and math.type(args[name]) == "float" then
        args[name] = math.tointeger(args[name]) or args[name]
      end
    end
    local ok, err = pcall(spec.from_args, spec, args, names)
    if not ok then parse_error(parser, raise, check.strip(err)) end
  end
  CHOSEN[args] = chosen
  return args
end

--- experiment.int_list(parser, flag, text, lo) -> a list of integers >= lo from a
--- comma-separated flag value (nil or "" gives {}); anything else is the parser's error
--- naming the flag.
function M.int_list(parser, flag, text, lo)
  local out = {}
  for s in tostring(text or ""):gmatch("[^,%s]+") do
    local v = math.tointeger(tonumber(s))
    if not v or v < lo then
      parser:error(string.format("%s must list integers >= %d, got %s", flag, lo, text))
    end
    out[#out + 1] = v
  end
  return out
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
  local chosen = CHOSEN[self.args] or {}
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
--- pictures in images (file names in the output folder).
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
  if o.images and #o.images > 0 then
    page:heading("Pictures")
    page:images(o.images, {width = 600})
  end
  page:heading("Flags")
  page:table(kv(plain(self.args)))
  return page:write(self:path("index.html"))
end

return M
