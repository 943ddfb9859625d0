--- glimpse.compare's grid (part of glimpse.compare; compare/init.lua publishes it): the
-- settings every configuration shares, the mechanism names, the configurations (mechanism x
-- task x seed) with the pairs a model refuses set aside, and a process's shard of them.
-- Tasks of one's own come from task files (compare/tasks.lua), which every configuration
-- names with their digests, so that its worker loads the same ones.
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local models = require "glimpse.models"
local util = require "glimpse.util"
local tasks = require("glimpse").data.compare
local own = require "glimpse.lab.compare.tasks"
local flags = require "glimpse.lab.flags"

local G = {}

--- The settings every configuration of a grid shares: training and test sizes, the models'
--- widths (compare.settings fills in the rest of a partial table).
G.SETTINGS = options.declare("compare.settings", {
  {"steps", "int", 800, range = {0}, help = "training steps of each configuration"},
  {"batch", "int", 32, range = {1}, help = "batch size"},
  {"lr", "number", 3e-3, range = {0}, help = "Adam learning rate (RNN models)"},
  {"clip", "number", 5, range = {0}, help = "gradient norm clip"},
  {"emb", "int", 16, range = {1}, help = "embedding size (RNN models)"},
  {"hidden", "int", 64, range = {1}, help = "RNN decoder size"},
  {"attn_hidden", "int", 32, range = {1}, help = "attention hidden size (additive, concat)"},
  {"window", "int", 3, range = {0}, help = "half width D of the local modes' window"},
  {"kernel", "int", 3, range = {1}, help = "the conv score's kernel width"},
  {"supervise", "number", 0.5, range = {0},
   help = "weight of the supervised-attention loss (+sup mechanisms)"},
  {"d_model", "int", 32, range = {1}, help = "Transformer width"},
  {"heads", "int", 4, range = {1}, help = "Transformer heads"},
  {"layers", "int", 2, range = {1}, help = "Transformer layers"},
  {"ff", "int", 64, range = {1}, help = "Transformer feed-forward width"},
  {"transformer_lr", "number", 3e-3, range = {0}, help = "Adam learning rate (Transformer)"},
  {"train_n", "int", 10000, range = {1}, help = "training examples"},
  {"valid_n", "int", 200, range = {1}, help = "validation examples (training lengths)"},
  {"test_n", "int", 100, range = {1}, help = "test examples per length"},
  {"test_lengths", "table", {10, 20, 30, 40, 50}, help = "test source lengths"},
  {"eval_every", "int", 100, range = {1}, help = "steps between validations (the curve)"},
  {"heatmap_length", "int", 20, range = {1}, help = "source length of the heatmap example"},
  {"data_seed", "int", 1, range = {0}, help = "seed of the data sets (+ seed - 1 for training)"},
})

-- test_lengths: a non-empty list of positive integers (the options' "table" says no more)
local function check_lengths(s, level)
  local t = s.test_lengths
  local ok = #t > 0
  for k, v in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > #t or math.type(check.integers(v)) ~= "integer"
       or v < 1 then
      ok = false
    end
  end
  if not ok then
    check.fail(level + 1, "compare.settings: option 'test_lengths' must be a non-empty list of " ..
               "positive integers, got %s", #t == 0 and next(t) == nil and "an empty list"
               or check.value(util.json_encode(t)))
  end
  for i, v in ipairs(t) do t[i] = math.tointeger(v) end
end

--- compare.settings(o) -> the full settings table (o's entries over the defaults of
--- compare.settings_options); an unknown key or a bad value (test_lengths: a non-empty list
--- of positive integers) is an error naming it.
function G.settings(o)
  local s = G.SETTINGS:check(o, 2)
  check_lengths(s, 2)
  return s
end

-- ---------------------------------------------------------------------------------------
-- what a record depends on

-- a copy of v with integral numbers as integers (JSON's 4000.0 is 4000), functions dropped
local function plain(v)
  if type(v) == "number" then return math.tointeger(v) or v end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do
    if type(x) ~= "function" then out[k] = plain(x) end
  end
  return out
end

--- compare.settings_key(settings) -> canonical JSON text of the settings (sorted keys,
--- integers as integers): two settings tables give the same text exactly when every value
--- that changes a result is the same
function G.settings_key(s)
  return util.json_encode(plain(s))
end

--- compare.settings_hash(settings [, task_files]) -> 8 hex digits of a 64-bit FNV-1a hash of
--- settings_key (and, with task files, of their digests): the tail of every configuration's
--- id, so a changed setting or a changed task file makes new ids (and new runs/<id>.json
--- files) instead of overwriting the records made with the old one
function G.settings_hash(s, files)
  local text = G.settings_key(s)
  for _, f in ipairs(files or {}) do text = text .. "\n" .. tostring(f.digest) end
  local h = -3750763034362895579                   -- 0xcbf29ce484222325 (FNV-1a offset)
  for i = 1, #text do
    h = (h ~ text:byte(i)) * 1099511628211         -- wraps modulo 2^64
  end
  return string.format("%08x", ((h >> 32) ~ h) & 0xffffffff)
end

G.GRID = options.declare("compare.grid", {
  {"mechanisms", "table|string", nil,
   help = "names (a list or a comma list): score/mode[+sup], rnnenc, " ..
          "transformer[-positions][+variant...]"},
  {"scores", "table|string", {"additive"}, help = "without mechanisms: scores x modes"},
  {"modes", "table|string", {"soft"}, help = "without mechanisms: scores x modes"},
  {"baselines", "table|string", {}, help = "without mechanisms: names added to scores x modes"},
  {"tasks", "table|string", nil,
   help = "task names or task files (*.lua) (default: the task files' tasks, else " ..
          "data.compare.TASKS)"},
  {"task_files", "table|string", nil,
   help = "task files to load (their tasks and scores; every worker loads them too)"},
  {"seeds", "int|table", 3, range = {1}, help = "a count (seeds 1..n) or a list of seeds"},
  {"settings", "table", nil, help = "what every configuration shares (compare.settings())"},
})

-- ---------------------------------------------------------------------------------------
-- mechanisms and the grid

--- The Transformer's mechanism names: transformer[-POSITIONS][+VARIANT...] (POSITIONS: a key
--- of TRANSFORMER_POSITIONS, default sinusoidal; VARIANT: mqa, gqa, gqaN, windowN, topkN,
--- linear, each kind at most once)
G.TRANSFORMER_POSITIONS = {sinusoidal = "sinusoidal", learned = "learned", rope = "rope",
                           alibi = "alibi", t5 = "t5", nope = "none"}
local POSITION_NAMES = {"sinusoidal", "learned", "rope", "alibi", "t5", "nope"}
G.TRANSFORMER_VARIANTS = {"mqa", "gqa", "gqaN", "windowN", "topkN", "linear"}
local VARIANT_WORDS = {"mqa", "gqa", "window", "topk", "linear"}

-- one +VARIANT of a transformer name -> the model option it sets and its value, its kind
local function transformer_variant(v, name)
  local word, n = v:match("^(%a+)(%d*)$")
  local num = n ~= "" and math.tointeger(tonumber(n)) or nil
  if word == "mqa" and n == "" then return "kv_heads", 1, "kv_heads" end
  if word == "gqa" then
    if n == "" then return "kv_heads", "half", "kv_heads" end
    if num and num >= 1 then return "kv_heads", num, "kv_heads" end
  end
  if word == "window" and num and num >= 1 then return "window", num, "window" end
  if word == "topk" and num and num >= 1 then return "top_k", num, "top_k" end
  if word == "linear" and n == "" then return "attention", "linear", "attention" end
  local known = false
  for _, w in ipairs(VARIANT_WORDS) do known = known or w == word end
  if known then
    check.fail(4, "compare: variant '+%s' in '%s' needs %s", v, name,
               (word == "mqa" or word == "linear") and "no number (+" .. word .. ")"
               or "a positive number (+" .. word .. "4" .. (word == "gqa" and ", or +gqa" or "")
                  .. ")")
  end
  check.fail(4, "compare: unknown Transformer variant '+%s' in '%s'%s (have %s)", v, name,
             check.did_you_mean(word or v, VARIANT_WORDS),
             table.concat(G.TRANSFORMER_VARIANTS, ", "))
end

-- a transformer[-POSITIONS][+VARIANT...] name -> its mechanism table (nil: not one)
local function parse_transformer(name)
  local head, rest = name:match("^(transformer[%w%-]*)(.*)$")
  if not head then return nil end
  local pos = head:match("^transformer%-(.*)$")
  if head ~= "transformer" and not pos then return nil end   -- "transformers": not ours
  local positions = "sinusoidal"
  if pos then
    positions = G.TRANSFORMER_POSITIONS[pos]
    if not positions then
      check.fail(3, "compare: unknown Transformer positions '%s' in '%s'%s (have %s)", pos, name,
                 check.did_you_mean(pos, POSITION_NAMES), table.concat(POSITION_NAMES, ", "))
    end
  end
  local m = {name = name, kind = "transformer", score = "scaled_dot", mode = "multi-head",
             positions = positions, transformer = {positions = positions}}
  if rest ~= "" and not rest:match("^%+[^+]") then
    check.fail(3, "compare: mechanism '%s' is not transformer[-positions][+variant...]", name)
  end
  local seen = {}
  for v in rest:gmatch("%+([^+]*)") do
    if v == "" then
      check.fail(3, "compare: mechanism '%s' has an empty +variant", name)
    end
    local key, value, kind = transformer_variant(v, name)
    if seen[kind] then
      check.fail(3, "compare: mechanism '%s' sets %s twice (+%s and +%s)", name, kind, seen[kind], v)
    end
    seen[kind], m.transformer[key] = v, value
  end
  return m
end

--- compare.parse_mechanism(name [, settings]) -> {name=, kind="rnn"|"rnnenc"|"transformer",
--- score=, mode=, supervise=bool, positions=, transformer=}; an error (with a did-you-mean)
--- for a malformed name or an unknown part.  The names:
---   score/mode[+sup]        an RNN decoder with attention (att.SCORES, att.MODES), supervised
---   rnnenc                  the RNN encoder-decoder without attention
---   transformer[-POSITIONS][+VARIANT...]   the Transformer; POSITIONS: sinusoidal (the
---       default: "transformer"), learned, rope, alibi, t5 or nope (no positions); VARIANT,
---       each kind at most once, in any order: mqa (one key/value head), gqa (heads/2 of
---       them: settings.heads, default 4) or gqaN (N), windowN (a sliding window:
---       self-attention sees the keys with |i - j| < N), topkN (each self-attention row
---       keeps its N best scores), linear (linear attention, Katharopoulos et al.); the
---       positions rope, alibi, t5 and the variants act in the self-attentions
---       e.g. transformer-rope+gqa, transformer-alibi+window8, transformer-nope+linear
--- transformer: the models.Transformer options the name sets (positions, kv_heads, window,
--- top_k, attention); positions: the same positions, as before
function G.parse_mechanism(name, settings)
  if type(name) ~= "string" then check.fail(2, "compare.parse_mechanism: name must be a string") end
  if name == "rnnenc" then return {name = name, kind = "rnnenc", score = "none", mode = "none"} end
  local m = parse_transformer(name)
  if m then
    if m.transformer.kv_heads == "half" then
      local heads = type(settings) == "table" and math.tointeger(settings.heads) or 4
      m.transformer.kv_heads = math.max(1, heads // 2)
    end
    return m
  end
  local score, mode, sup = name:match("^([%w_]+)/([%w%-]+)(%+?s?u?p?)$")
  if not score or (sup ~= "" and sup ~= "+sup") then
    check.fail(2, "compare: mechanism '%s' is not score/mode[+sup], rnnenc or " ..
               "transformer[-positions][+variant...]%s", name,
               check.did_you_mean(name, {"rnnenc", "transformer", "transformer-learned",
                                         "transformer-rope", "transformer-alibi",
                                         "transformer-t5", "transformer-nope"}))
  end
  local function known(v, list, what)
    for _, x in ipairs(list) do if x == v then return end end
    check.fail(3, "compare: unknown %s '%s' in '%s'%s (have %s)", what, v, name,
               check.did_you_mean(v, list), table.concat(list, ", "))
  end
  known(score, att.SCORES, "score")
  known(mode, att.MODES, "mode")
  return {name = name, kind = "rnn", score = score, mode = mode, supervise = sup == "+sup"}
end

-- why a mechanism cannot be built (nil when it can): the model's own argument checks on a
-- tiny vocabulary
local function invalid(mech, s)
  if mech.kind == "transformer" then
    local o = {src_vocab = {"a", "b"}, tgt_vocab = {"a", "b"}, d = s.d_model, heads = s.heads,
               layers = 1, ff = 4, max_len = 8}
    for k, v in pairs(mech.transformer) do o[k] = v end
    local ok, err = pcall(models.Transformer, o)
    return not ok and check.strip(err) or nil
  end
  if mech.kind ~= "rnn" then return nil end
  local ok, err = pcall(models.Seq2Seq, {src_vocab = {"a", "b"}, tgt_vocab = {"a", "b"},
                                         score = mech.score, mode = mech.mode, hidden = 4,
                                         emb = 2, attn_hidden = 2, kernel = s.kernel,
                                         window = s.window, max_src = 4})
  if ok then return nil end
  return check.strip(err)
end

-- a list, or a comma list's words
local function list_of(v)
  if type(v) ~= "string" then return v end
  local t = {}
  for x in v:gmatch("[^,%s]+") do t[#t + 1] = x end
  return t
end

-- a task list entry that names a task file rather than a task
local function is_file(t) return type(t) == "string" and (t:match("%.lua$") or t:find("/")) end

-- the task files of a grid (o.task_files and the file entries of o.tasks), loaded: the
-- task names to run and {path=, digest=} per file (in the order given, each once)
local function load_files(o)
  local files, names, seen = {}, {}, {}
  local given = list_of(o.tasks or {})
  local paths = list_of(o.task_files or {})
  for _, t in ipairs(given) do
    if is_file(t) then paths[#paths + 1] = t end
  end
  local file_tasks = {}
  for _, p in ipairs(paths) do
    if type(p) ~= "string" then
      check.fail(3, "compare.grid: task_files must be paths, got %s", check.value(p))
    end
    local info = own.load_task_file(p)
    if not seen[info.path] then
      seen[info.path] = true
      files[#files + 1] = {path = info.path, digest = info.digest}
    end
    for _, n in ipairs(info.tasks) do file_tasks[#file_tasks + 1] = n end
  end
  for _, t in ipairs(given) do
    if is_file(t) then
      for _, n in ipairs(own.load_task_file(t).tasks) do names[#names + 1] = n end
    else
      names[#names + 1] = t
    end
  end
  if o.tasks == nil then
    names = #file_tasks > 0 and file_tasks or table.move(tasks.TASKS, 1, #tasks.TASKS, 1, {})
  end
  return names, files
end

-- the settings of one task's configurations: a task of one's own with test lengths is
-- tested at them, and its heatmap is of the test length nearest the settings' heatmap_length
local function task_settings(task, s)
  if not task.own then return s end
  local ts = G.settings(plain(s))
  local tl = task.test_lengths
  if tl then ts.test_lengths = table.move(tl, 1, #tl, 1, {}) end
  local best = ts.test_lengths[1]
  for _, L in ipairs(ts.test_lengths) do
    if math.abs(L - ts.heatmap_length) < math.abs(best - ts.heatmap_length) then best = L end
  end
  if tl or not task:can_make(ts.heatmap_length) then ts.heatmap_length = best end
  return ts
end

--- compare.grid{mechanisms= | scores=, modes=, baselines=, tasks=, task_files=, seeds=3 |
---   {list}, settings=} -> configs, skipped.  The options are compare.grid_options.
-- configs: one table per (task, mechanism, seed) in that order, with id
-- (task.mechanism.s<seed>.<hash of the settings and the task files' digests>), task,
-- mechanism, kind, score, mode, supervise, positions, transformer (the model options of a
-- transformer name: positions, kv_heads, window, top_k, attention), seed, settings,
-- train_lengths and,
-- with task files, task_files ({path=, digest=} each: every worker loads them before it
-- runs).  tasks: names, or task files (*.lua) standing for the tasks they define; without
-- tasks, the task files' tasks (or data.compare.TASKS when they define none).  A task of
-- one's own with test_lengths is tested at them (its configurations' settings say so).
-- skipped: {mechanism=, reason=[, task=]} for the pairs the model refuses (e.g. location
-- mode with the dot score) and the supervised mechanisms of a task without alignments.  No
-- mechanisms, no tasks, no seeds, an unknown task or score, a score registered outside the
-- task files (the workers would not know it), or a test length a task cannot make is an
-- error (an empty grid writes nothing).
function G.grid(user)
  if type(user) ~= "table" then check.fail(2, "compare.grid: expected an options table") end
  local o = G.GRID:check(user, 2)
  -- settings read back from JSON (800.0 for 800) are the same settings
  local s = o.settings and G.settings(plain(o.settings)) or G.settings({})
  local task_names, files = load_files(o)
  local names = {}
  if o.mechanisms then
    names = list_of(o.mechanisms)
    if #names == 0 then check.fail(2, "compare.grid: no mechanisms (an empty list)") end
  else
    for _, sc in ipairs(list_of(o.scores)) do
      for _, md in ipairs(list_of(o.modes)) do names[#names + 1] = sc .. "/" .. md end
    end
    for _, b in ipairs(list_of(o.baselines)) do names[#names + 1] = b end
    if #names == 0 then
      check.fail(2, "compare.grid: no mechanisms (scores x modes and baselines are empty)")
    end
  end
  local seeds = o.seeds
  if math.type(seeds) == "integer" then
    local t = {}
    for i = 1, seeds do t[i] = i end
    seeds = t
  end
  if #seeds == 0 then check.fail(2, "compare.grid: no seeds (an empty list)") end
  for i, seed in ipairs(seeds) do
    seeds[i] = math.tointeger(tonumber(seed))
    if not seeds[i] then check.fail(2, "compare.grid: seeds must be integers, got %s", check.value(seed)) end
  end
  if #task_names == 0 then check.fail(2, "compare.grid: no tasks (an empty list)") end
  local task_of, settings_of = {}, {}
  for _, t in ipairs(task_names) do
    local ok, task = pcall(tasks.task, t)                        -- unknown task: an error
    if not ok then check.fail(2, "%s", check.strip(task)) end
    local ts = task_settings(task, s)
    for _, L in ipairs({ts.heatmap_length, table.unpack(ts.test_lengths)}) do
      if not task:can_make(L) then
        check.fail(2, "compare.grid: task '%s' makes sources %s, not %d " ..
                   "(test_lengths or heatmap_length)", t, task:lengths_text(), L)
      end
    end
    task_of[t], settings_of[t] = task, ts
  end
  local mechs, skipped, seen = {}, {}, {}
  for _, n in ipairs(names) do
    if not seen[n] then
      seen[n] = true
      local m = G.parse_mechanism(n, s)
      if m.kind == "rnn" and att.is_registered_score(m.score) and not own.score_file(m.score) then
        check.fail(2, "compare.grid: the score '%s' was registered in this process, not by a " ..
                   "task file: the worker processes would not know it; register it in a task " ..
                   "file (task_files, --task-file)", m.score)
      end
      local why = invalid(m, s)
      if why then skipped[#skipped + 1] = {mechanism = n, reason = why}
      else mechs[#mechs + 1] = m end
    end
  end
  local configs = {}
  for _, t in ipairs(task_names) do
    local task, ts = task_of[t], settings_of[t]
    local hash = G.settings_hash(ts, files)
    for _, m in ipairs(mechs) do
      if m.supervise and task.has_alignments == false then
        skipped[#skipped + 1] = {mechanism = m.name, task = t,
                                 reason = "supervised attention needs alignments; task '" .. t ..
                                          "' has none"}
      else
        for _, seed in ipairs(seeds) do
          configs[#configs + 1] = {
            id = string.format("%s.%s.s%d.%s", t, m.name:gsub("[/+]", "-"), seed, hash),
            task = t, mechanism = m.name, kind = m.kind, score = m.score, mode = m.mode,
            supervise = m.supervise or false, positions = m.positions,
            transformer = m.transformer, seed = seed,
            settings = ts, train_lengths = {task.train_lengths[1], task.train_lengths[2]},
            task_files = #files > 0 and files or nil}
        end
      end
    end
  end
  return configs, skipped
end

-- ---------------------------------------------------------------------------------------
-- named grids (scripts/compare.lua --grid NAME)

--- compare.GRIDS: named grids, each {help=, mechanisms=, tasks=, seeds=, settings=} (settings:
--- the entries that differ from compare.DEFAULTS).  "length": the length extrapolation grid
--- (docs/experiments/compare.md#length-extrapolation): the Transformer with each position
--- scheme and each attention variant (on sinusoidal positions) beside the two best RNN
--- attention mechanisms of the default run, trained on lengths 5-20 and tested up to 100 on
--- reversal and dates (the two tasks whose Transformer rows fall past the training
--- lengths; both make sources of any length), 2 seeds, 800 steps, 50 test examples a length.
G.GRIDS = {
  length = {
    help = "length extrapolation: Transformer position schemes and variants, tested up to 100",
    mechanisms = {"transformer", "transformer-learned", "transformer-rope", "transformer-alibi",
                  "transformer-t5", "transformer-nope", "transformer+gqa", "transformer+mqa",
                  "transformer+window8", "transformer+topk4", "transformer+linear",
                  "conv/soft", "general/soft"},
    tasks = {"reversal", "dates"},
    seeds = 2,
    settings = {steps = 800, eval_every = 100, test_n = 50,
                test_lengths = {10, 20, 40, 60, 80, 100}},
  },
}

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

--- compare.named_grid(name) -> the options of compare.grid for compare.GRIDS[name] (a copy,
--- its settings filled in by compare.settings): {mechanisms=, tasks=, seeds=, settings=};
--- an unknown name is an error with a did-you-mean
function G.named_grid(name)
  local names = {}
  for k in pairs(G.GRIDS) do names[#names + 1] = k end
  table.sort(names)
  if type(name) ~= "string" or not G.GRIDS[name] then
    check.fail(2, "compare.named_grid: unknown grid %s%s (have %s)", check.value(name),
               type(name) == "string" and check.did_you_mean(name, names) or "",
               table.concat(names, ", "))
  end
  local g = copy(G.GRIDS[name])
  g.settings, g.help = G.settings(g.settings or {}), nil
  return g
end

--- compare.grid_flags(name) -> the flag values of named grid `name` for scripts/compare.lua
--- (mechanisms, tasks and test_lengths as comma lists; seeds, steps, eval_every, test_n...):
--- those that differ from the script's defaults
function G.grid_flags(name)
  local ok, g = pcall(G.named_grid, name)
  if not ok then error(g, 2) end
  local f = {mechanisms = table.concat(g.mechanisms, ","), tasks = table.concat(g.tasks, ","),
             seeds = g.seeds}
  for k, v in pairs(G.GRIDS[name].settings or {}) do
    f[k] = type(v) == "table" and table.concat(v, ",") or v
  end
  return f
end

--- compare.apply_grid(args, name) -> args: scripts/compare.lua's parsed flags with named grid
--- `name`'s values (grid_flags) in place of every flag the user did not set (on the command
--- line or in --config: those win; --quick's values and the defaults do not)
function G.apply_grid(args, name)
  local ok, f = pcall(G.grid_flags, name)
  if not ok then error(f, 2) end
  local chosen = flags.chosen(args)
  for k, v in pairs(f) do
    if not chosen[k] then args[k] = v end
  end
  return args
end

--- compare.shard(configs, rank, size) -> the configurations of process `rank` (0-based) out
--- of `size`: those at 1-based index i with (i - 1) % size == rank
function G.shard(configs, rank, size)
  if math.type(rank) ~= "integer" or math.type(size) ~= "integer" or size < 1 or rank < 0
     or rank >= size then
    check.fail(2, "compare.shard: need 0 <= rank < size, got rank %s size %s", tostring(rank),
               tostring(size))
  end
  local out = {}
  for i, c in ipairs(configs) do if (i - 1) % size == rank then out[#out + 1] = c end end
  return out
end

return G
