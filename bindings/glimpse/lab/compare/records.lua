--- glimpse.compare's records (part of glimpse.compare; compare/init.lua publishes them): what
-- a runs/<id>.json holds and whether it can be trusted.  Every record is checked on read
-- against the configuration it claims: a finished one must have every field the summary and
-- the page read, of the right type, for this configuration's settings; anything else is
-- "malformed" (named, and run again), a failure, or an interrupted run (run again).
local check = require "glimpse.check"
local util = require "glimpse.util"
local grid = require "glimpse.lab.compare.grid"

local R = {}

local has_cjson, cjson = pcall(require, "cjson")
local NULL = has_cjson and cjson.null or nil       -- JSON null as lua-cjson reads it

local function is_null(v) return NULL ~= nil and v == NULL end

--- compare.RECORD_FIELDS: every field of a finished record (runs/<id>.json); those that may
--- have no value (compare.OPTIONAL_FIELDS: steps_to_90 when 90% is never reached, the
--- alignment numbers of a task without alignments or of rnnenc, centre_error outside
--- local-p, heatmap, peak_rss_kb where /proc is not there and in records made before it) are
--- written as null, never left out
R.FIELDS = {"id", "task", "mechanism", "kind", "score", "mode", "seed", "steps", "params",
            "train_seconds", "wall_seconds", "cpu_seconds", "ms_per_step", "cpu_ms_per_step",
            "curve", "accuracy_by_length", "steps_to_90", "steps_to_99", "alignment_accuracy",
            "attention_entropy", "centre_error", "heatmap", "peak_rss_kb", "config"}
R.OPTIONAL = {"steps_to_90", "steps_to_99", "alignment_accuracy", "attention_entropy",
              "centre_error", "heatmap", "peak_rss_kb"}

--- compare.null: JSON null as written and read (lua-cjson's), a value distinct from nil
R.null = NULL

--- compare.complete(t, fields) -> a shallow copy of t with null in every field of `fields`
--- (default compare.RECORD_FIELDS) that t lacks: what is written as JSON has every field
function R.complete(t, fields)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  for _, k in ipairs(fields or R.FIELDS) do
    if out[k] == nil then out[k] = NULL end
  end
  return out
end

local function num(v) return type(v) == "number" and v == v end

-- why record r is not a finished record of configuration c (nil when it is one); optional
-- fields holding JSON null are dropped from r
local function problem(r, c)
  local s = c.settings
  if type(r.config) ~= "table" then return "no config" end
  if r.id ~= c.id then return string.format("id %s, not %s", check.value(r.id), c.id) end
  for _, k in ipairs({"task", "mechanism", "kind"}) do
    if r[k] ~= c[k] then return string.format("%s is %s, not '%s'", k, check.value(r[k]), c[k]) end
  end
  if r.seed ~= c.seed then return string.format("seed is %s, not %d", check.value(r.seed), c.seed) end
  if r.steps ~= s.steps then
    return string.format("steps is %s, not the budget %d", check.value(r.steps), s.steps)
  end
  for _, k in ipairs({"params", "ms_per_step", "cpu_ms_per_step", "train_seconds",
                      "wall_seconds", "cpu_seconds"}) do
    if not num(r[k]) or r[k] < 0 then return string.format("%s is %s", k, check.value(r[k])) end
  end
  local acc = r.accuracy_by_length
  if type(acc) ~= "table" or #acc ~= #s.test_lengths then
    return string.format("accuracy_by_length must list the %d test lengths", #s.test_lengths)
  end
  for i, L in ipairs(s.test_lengths) do
    local e = acc[i]
    if type(e) ~= "table" or e.length ~= L then
      return string.format("accuracy_by_length[%d] is not length %d", i, L)
    end
    for _, k in ipairs({"exact", "token"}) do
      if not num(e[k]) or e[k] < 0 or e[k] > 1 then
        return string.format("accuracy_by_length[%d].%s is %s", i, k, check.value(e[k]))
      end
    end
  end
  if type(r.curve) ~= "table" then return "curve is not a list" end
  for i, pt in ipairs(r.curve) do
    if type(pt) ~= "table" or not num(pt[1]) or not num(pt[2]) then
      return string.format("curve[%d] is not a {step, accuracy} pair", i)
    end
  end
  for _, k in ipairs({"steps_to_90", "steps_to_99", "alignment_accuracy", "attention_entropy",
                      "centre_error", "peak_rss_kb"}) do
    if is_null(r[k]) then r[k] = nil end
    if r[k] ~= nil and not num(r[k]) then return string.format("%s is %s", k, check.value(r[k])) end
  end
  for _, k in ipairs({"score", "mode"}) do
    if is_null(r[k]) then r[k] = nil end
    if r[k] ~= nil and type(r[k]) ~= "string" then return k .. " is not a string" end
  end
  local h = r.heatmap
  if is_null(h) then r.heatmap, h = nil, nil end
  if h ~= nil then
    if type(h) ~= "table" or type(h.alpha) ~= "table" or type(h.src) ~= "table"
       or type(h.tgt) ~= "table" or #h.alpha ~= #h.tgt or #h.alpha == 0 then
      return "heatmap is not {alpha=, src=, tgt=}"
    end
    for _, w in ipairs(h.src) do if type(w) ~= "string" then return "heatmap.src holds a non-string" end end
    for _, w in ipairs(h.tgt) do if type(w) ~= "string" then return "heatmap.tgt holds a non-string" end end
    for i, row in ipairs(h.alpha) do
      if type(row) ~= "table" or #row ~= #h.src then return string.format("heatmap.alpha[%d] is not a row", i) end
      for _, x in ipairs(row) do if not num(x) then return string.format("heatmap.alpha[%d] holds a non-number", i) end end
    end
  end
  return nil
end

-- the digests of a configuration's task files, as one text (their paths do not count)
local function digests(c)
  local t = {}
  for i, f in ipairs(type(c.task_files) == "table" and c.task_files or {}) do
    t[i] = type(f) == "table" and tostring(f.digest) or "?"
  end
  return table.concat(t, ",")
end

--- compare.same_config(a, b) -> whether two configurations give the same result (their ids,
--- mechanisms, seeds, the Transformer's model options, every setting and the content of
--- their task files; the worker's threads and time guard and the task files' paths do not
--- count)
function R.same_config(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for _, k in ipairs({"id", "task", "mechanism", "kind", "score", "mode", "supervise",
                      "positions", "seed"}) do
    local x, y = a[k], b[k]
    if type(x) == "number" and type(y) == "number" then
      if x ~= y then return false end
    elseif x ~= y then
      return false
    end
  end
  if type(a.settings) ~= "table" or type(b.settings) ~= "table" then return false end
  if digests(a) ~= digests(b) then return false end
  -- the Transformer's model options (kv_heads, window, ...): absent before them, the same
  -- as positions alone
  local ta = type(a.transformer) == "table" and a.transformer or {positions = a.positions}
  local tb = type(b.transformer) == "table" and b.transformer or {positions = b.positions}
  if a.kind == "transformer" and grid.settings_key(ta) ~= grid.settings_key(tb) then
    return false
  end
  return grid.settings_key(a.settings) == grid.settings_key(b.settings)
end

--- compare.validate(record, config) -> true, or nil and the reason: whether record is a
--- finished record of config (every field the summary and the page read, of the right type
--- and for config's settings)
function R.validate(r, c)
  if type(r) ~= "table" then return nil, "not a JSON object" end
  if r.error ~= nil then return nil, "a failure" end
  if r.interrupted then return nil, "interrupted" end
  if not R.same_config(r.config, c) then return nil, "made with another configuration" end
  local why = problem(r, c)
  if why then return nil, why end
  return true
end

function R.result_path(dir, c) return string.format("%s/runs/%s.json", dir, c.id) end

--- compare.inspect(dir, c) -> state, record, why: what dir/runs/<id>.json holds for
--- configuration c.  state: "finished" (record: the record, checked), "failed" (why: the
--- error), "interrupted", "absent", "malformed" (why: what is wrong: it runs again), or
--- "other" (a finished record of another configuration under the same id: never overwritten).
function R.inspect(dir, c)
  local p = R.result_path(dir, c)
  if not util.exists(p) then return "absent" end
  local ok, r = pcall(util.read_json, p)
  if not ok then return "malformed", nil, check.strip(r) end
  if type(r) ~= "table" then return "malformed", nil, "not a JSON object" end
  r = check.integers(r)
  if r.interrupted == true then return "interrupted", r, "interrupted at step " .. tostring(r.steps) end
  if r.error ~= nil then
    if type(r.error) ~= "string" then return "malformed", nil, "error is not a string" end
    return "failed", r, r.error
  end
  if type(r.config) == "table" and not R.same_config(r.config, c) then
    -- a finished record made with other settings (an id that hides them: an older record
    -- or a hash collision) is not this configuration's and is not overwritten
    local rc = r.config
    if rc.id == c.id and type(rc.settings) == "table" and type(rc.settings.test_lengths) == "table" then
      local ok2, why = pcall(problem, r, rc)
      if ok2 and why == nil then return "other", r, "made with other settings" end
    end
    return "malformed", nil, "its config is not this configuration's"
  end
  local why = problem(r, c)
  if why then return "malformed", nil, why end
  return "finished", r
end

return R
