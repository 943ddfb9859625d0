--- glimpse.lab.flags -- the command line of an experiment script: the common flags (seed,
-- threads, steps, out, quick, config, ...), the flags experiments share, a spec's options as
-- flags, and parsing with --config files and --quick's values.  glimpse.experiment
-- publishes these functions (experiment.parser, add_flags, int_flags, parse, int_list).
--
-- Flags come from lua-argparse.  --config FILE is a Lua file returning flag values; they
-- replace the defaults, and flags given on the command line replace both.
local check = require "glimpse.check"
local options = require "glimpse.options"

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

-- target ("time_limit" for --time-limit) -> the argparse option that sets it
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

-- argparse's "argument for option '--x' must be one of 'a', 'b'" with the value given on the
-- command line and the nearest choice: "..., got 'bach' (did you mean 'batch'?)"
local function choices_hint(parser, list, msg)
  local flag = msg:match("^argument for option '(%-%-[%w%-]+)' must be one of ")
  if not flag then return msg end
  local given
  for i, a in ipairs(list) do
    if a == flag then given = list[i + 1]
    elseif type(a) == "string" and a:sub(1, #flag + 1) == flag .. "=" then given = a:sub(#flag + 2) end
  end
  local opt
  for _, o in ipairs(parser._options or {}) do
    for _, alias in ipairs(o._aliases or {}) do if alias == flag then opt = o end end
  end
  if given == nil or not opt or not opt._choices then return msg end
  return string.format("%s, got '%s'%s", msg, given, check.did_you_mean(given, opt._choices))
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
  if not ok then return parse_error(parser, raise, choices_hint(parser, list, args)) end
  local given = explicit(list)
  local chosen = {}                 -- the flags the user set: on the command line or --config
  for k in pairs(given) do chosen[k] = true end
  local by_target = options_by_target(parser)
  local known = by_target
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

--- flags.chosen(args) -> {target = true} for the flags the user set (on the command line or
--- in --config) for args from flags.parse, or {}
function M.chosen(args)
  return CHOSEN[args] or {}
end

return M
