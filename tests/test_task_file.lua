-- tests/test_task_file.lua -- your own experiment in the compare tool (issue 25, items 1, 2, 5):
-- a task file of at most 30 lines (tests/fixtures/compare_task.lua, the example of
-- docs/api/compare.md: a task not in datasets/ and a registered score) runs through
-- scripts/compare.lua with --jobs 2, resumes after kill -9 of compare mid-run, and under
-- mpirun -np 2 gives the same numbers (skipped without mpirun); a --config file lists task
-- names, task files and task tables of its own; the registered score is in
-- the table beside the built-in ones; a task without alignments has null alignment accuracy
-- and its supervised mechanisms are skipped; every record and summary row has every field
-- (null where there is no value); a changed task file makes new ids and a worker refuses a
-- configuration made from other content; the contract's mistakes are errors that name them;
-- compare.write fills its meta fields by default; the page's heatmaps are at least 320 px
-- wide at 1280 px in headless Chromium, with rows taller than their labels.
-- Every run is tiny (a few steps of an 8-wide model).
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local util = glimpse.util
local compare = glimpse.compare
local viz = require "glimpse.plot.viz"

local T = {}

local FIXTURE = "tests/fixtures/compare_task.lua"
local MAX_LINES = 30          -- the issue's bound on the example task file
local WINDOW = 1280           -- the page's window width in the browser check
local MIN_HEATMAP = 320       -- the least width of a heatmap on the page (px)
local WAIT = 60               -- seconds a background compare may take to react (a loaded machine)
local MECHANISMS = "dot/soft,general/soft,additive/soft,mine/soft"

local function exe() return arg and arg[-1] or "build/glimpse" end
local function q(s) return util.shell_quote(s) end

local run = H.run

local wait_for = H.wait_for

-- the script on the fixture with a tiny budget; extra: more flags
local function script_cmd(out, extra)
  return string.format("%s scripts/compare.lua --task-file %s --mechanisms %s --seeds 1 " ..
                       "--steps 4 --eval-every 2 --train-n 32 --valid-n 4 --test-n 4 " ..
                       "--hidden 8 --out %s %s", q(exe()), FIXTURE, MECHANISMS, q(out),
                       extra or "")
end

-- the finished records in out/runs, by id (read as the JSON text has them)
local function finished(out)
  local t = {}
  for _, f in ipairs(util.is_dir(out .. "/runs") and H.ls(out .. "/runs") or {}) do
    if f:match("%.json$") and not f:match("%.config%.json$") then
      local ok, r = pcall(util.read_json, out .. "/runs/" .. f)
      if ok and type(r) == "table" and r.accuracy_by_length then t[r.id] = r end
    end
  end
  return t
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- every field present in a JSON object (null included: lua-cjson reads it as cjson.null)
local function assert_every_field(obj, fields, what)
  for _, k in ipairs(fields) do
    lu.assertNotNil(obj[k], string.format("%s has no field '%s'", what, k))
  end
end

local function numbers(out)
  local t = {}
  for _, r in ipairs(util.read_json(out .. "/results.json").results) do
    t[r.task .. " " .. r.mechanism] = {r.accuracy_by_length, r.curve, r.params,
                                       r.alignment_accuracy}
  end
  return t
end

-- ---------------------------------------------------------------------------------------
-- the page in the browser: each image's rendered and natural size

local WIDTHS_SCRIPT = [[<script>
window.addEventListener("load", function () {
  var out = [];
  for (var i = 0; i < document.images.length; i++) {
    var im = document.images[i], r = im.getBoundingClientRect();
    out.push(im.getAttribute("src") + " " + Math.round(r.width) + " " + im.naturalWidth);
  }
  var pre = document.createElement("pre");
  pre.id = "widths";
  pre.textContent = "W[" + out.join(";") + "]W";
  document.body.appendChild(pre);
});
</script>]]

-- {src=, width= (as laid out), natural=} per image of the page at `width` px
local function image_widths(page, width)
  local dom = H.dump_dom(page, width, WIDTHS_SCRIPT)
  local list = dom:match("<pre id=\"widths\">W%[(.-)%]W</pre>")
  lu.assertNotNil(list, "no widths line in the DOM")
  local out = {}
  for item in list:gmatch("[^;]+") do
    local src, w, n = item:match("^(%S+) (%d+) (%d+)$")
    out[#out + 1] = {src = src, width = tonumber(w), natural = tonumber(n)}
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- the task file through the script

function T.test_the_task_file_has_at_most_30_lines_and_is_the_documented_example()
  local text = H.read_file(FIXTURE)
  lu.assertTrue(select(2, text:gsub("\n", "")) <= MAX_LINES)
  local doc = H.read_file("docs/api/compare.md")
  local example = doc:match("## Your own task.-```lua\n(.-)```")
  lu.assertNotNil(example, "docs/api/compare.md has no example under 'Your own task'")
  lu.assertEquals(example, text, "the documented example is tests/fixtures/compare_task.lua")
end

function T.test_task_file_runs_with_two_jobs_and_its_score_sits_beside_the_built_in_ones()
  local d = H.tmpdir()
  local out = d .. "/out"
  local ok, _, text = run(script_cmd(out, "--jobs 2"))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "tasks swap")
  lu.assertStrContains(text, "4 results, 0 failed, 0 not run")
  local md = H.read_file(out .. "/results.md")
  lu.assertStrContains(md, "### swap")
  for m in MECHANISMS:gmatch("[^,]+") do lu.assertStrContains(md, "| " .. m .. " |") end
  lu.assertStrContains(md, "| @8 | @16 |", "the task's own test lengths")
  -- every record and every summary row has every field, null where there is no value
  local recs = finished(out)
  lu.assertEquals(count(recs), 4)
  for id, r in pairs(recs) do
    assert_every_field(r, compare.RECORD_FIELDS, id)
    lu.assertEquals(r.steps_to_90, compare.null, id .. ": 90% is not reached in 4 steps")
    lu.assertEquals(r.centre_error, compare.null, id .. ": no local-p window")
    lu.assertEquals(type(r.alignment_accuracy), "number", id)
    lu.assertEquals(r.config.task_files[1].digest, compare.digest(H.read_file(FIXTURE)))
  end
  local res = util.read_json(out .. "/results.json")
  for _, row in ipairs(res.results) do assert_every_field(row, compare.ROW_FIELDS, row.mechanism) end
  -- compare.write's meta fields are filled
  lu.assertEquals(res.jobs, 2)
  lu.assertEquals(type(res.seconds), "number")
  lu.assertEquals(res.configurations, 4)
  local html = H.read_file(out .. "/index.html")
  lu.assertNotStrContains(html, "? seconds")
  lu.assertStrContains(html, "with 2 worker processes")
  -- the heatmaps: rows taller than their labels, at least 320 px wide as the page shows them
  lu.assertEquals(select(2, html:gsub("<img ", "")), 4)
  local h = recs[next(recs)].heatmap
  local o = compare.heatmap_options(h)
  lu.assertTrue(o.cell >= viz.text_height(o.scale) + 2, "row labels would overlap")
  local c = H.browser_check(out .. "/index.html", WINDOW)          -- skips without chromium
  lu.assertEquals(c.broken, 0, c.line)
  lu.assertTrue(c.scroll <= WINDOW and c.body <= WINDOW, c.line)
  local imgs = image_widths(out .. "/index.html", WINDOW)
  lu.assertEquals(#imgs, 4)
  for _, im in ipairs(imgs) do
    lu.assertTrue(im.width >= MIN_HEATMAP, string.format("%s is %d px wide", im.src, im.width))
    lu.assertEquals(im.width, im.natural, im.src .. " is shrunk: its labels with it")
  end
end

function T.test_kill_9_mid_run_and_the_same_command_finishes_with_the_records()
  local d = H.tmpdir()
  local out = d .. "/out"
  local cmd = script_cmd(out, "--jobs 2 --seeds 2"):gsub("%-%-steps 4 ", "--steps 300 ")
  os.execute(string.format("sh -c %s", q(string.format("(%s > %s 2>&1; echo $? > %s) " ..
                                                         "> /dev/null 2>&1 &", cmd, q(d .. "/log"),
                                                         q(d .. "/rc")))))
  local function owner()
    local ok, o = pcall(util.read_json, out .. "/compare.lock/owner.json")
    return ok and type(o) == "table" and o.workers and o or nil
  end
  lu.assertTrue(wait_for(function() return owner() and count(finished(out)) >= 1 end, WAIT),
                "no configuration finished: " .. tostring(H.read_file(d .. "/log")))
  local before = finished(out)
  lu.assertTrue(count(before) < 8, "every configuration finished before the kill")
  os.execute("kill -9 " .. math.tointeger(owner().pid))
  lu.assertTrue(wait_for(function() return util.exists(d .. "/rc") end, WAIT))
  local ok, _, text = run(cmd)
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "took over the lock")
  -- a worker may finish between reading `before` and the kill: at least those are kept
  local kept = tonumber(text:match("(%d+) finished already"))
  lu.assertNotNil(kept, text)
  lu.assertTrue(kept >= count(before) and kept < 8, text)
  lu.assertStrContains(text, "8 results, 0 failed, 0 not run")
  local after = finished(out)
  lu.assertEquals(count(after), 8)
  for id, r in pairs(before) do
    lu.assertEquals(after[id].wall_seconds, r.wall_seconds, id .. " ran again")
  end
  lu.assertStrContains(H.read_file(out .. "/results.md"), "| mine/soft |")
end

function T.test_under_mpirun_each_rank_loads_the_task_file_and_the_numbers_are_the_same()
  local p = io.popen("command -v mpirun 2>/dev/null")
  local mpirun = p:read("l")
  p:close()
  if not mpirun or mpirun == "" then lu.skip("mpirun is not installed (openmpi-bin)") end
  local d = H.tmpdir()
  local ok, _, text = run(script_cmd(d .. "/local", "--jobs 2"))
  lu.assertTrue(ok, text)
  -- Open MPI keeps allocations to the end, which LeakSanitizer would report under make asan
  -- (as tests/test_dist.lua says): the ranks run without leak detection, other checks on
  local asan = (os.getenv("ASAN_OPTIONS") or "") .. ":detect_leaks=0"
  ok, _, text = run(string.format("ASAN_OPTIONS=%s timeout 300 %s -np 2 --allow-run-as-root " ..
                                  "--oversubscribe %s", q(asan), q(mpirun), script_cmd(d .. "/mpi")))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "2 ranks")
  lu.assertStrContains(text, "4 results, 0 failed, 0 not run")
  lu.assertEquals(numbers(d .. "/mpi"), numbers(d .. "/local"))
end

function T.test_a_config_file_lists_names_task_files_and_task_tables()
  local d = H.tmpdir()
  local cfg = d .. "/cfg.lua"
  H.write_file(cfg, string.format([[
return {steps = 4, eval_every = 2, train_n = 32, valid_n = 4, test_n = 4, hidden = 8, seeds = 1,
  test_lengths = "8", mechanisms = "mine/soft", jobs = 2, task_file = %q,
  tasks = {"swap", {name = "twice", alphabet = "xyz", train_lengths = {3, 6},
    generate = function(rng, L)
      local s = {}
      for i = 1, L do local k = rng:int(1, 3); s[i] = ("xyz"):sub(k, k) end
      return table.concat(s), table.concat(s) .. table.concat(s)
    end}}}
]], FIXTURE))
  local ok, _, text = run(string.format("%s scripts/compare.lua --config %s --out %s", q(exe()),
                                        q(cfg), q(d .. "/out")))
  lu.assertTrue(ok, text)
  lu.assertStrContains(text, "tasks swap,twice")
  lu.assertStrContains(text, "2 results, 0 failed, 0 not run")
  for _, r in pairs(finished(d .. "/out")) do
    if r.task == "twice" then
      lu.assertEquals(r.alignment_accuracy, compare.null, "twice has no alignments")
      lu.assertEquals(#r.config.task_files, 2, "the workers load the config file too")
    end
  end
end

-- ---------------------------------------------------------------------------------------
-- the library: tasks without alignments, changed files, the contract's errors, write's meta

local function tiny_settings()
  return compare.settings{steps = 4, eval_every = 2, train_n = 32, valid_n = 4, test_n = 4,
                          test_lengths = {6, 9}, heatmap_length = 6, hidden = 8,
                          attn_hidden = 4, emb = 4, batch = 8}
end

-- a pairs task without alignments, in a file of its own: word tokens, reversed
local PAIRS_FILE = [[
local pairs_ = {}
local words = {"red", "green", "blue", "cat", "dog"}
for n = 3, 9 do
  for k = 1, 4 do
    local s = {}
    for i = 1, n do s[i] = words[(i * k + n) % #words + 1] end
    local t = {}
    for i = 1, n do t[i] = s[n + 1 - i] end
    pairs_[#pairs_ + 1] = {table.concat(s, " "), table.concat(t, " ")}
  end
end
return {name = "wordrev", pairs = pairs_, alphabet = words, train_lengths = {3, 8}}
]]

function T.test_a_task_without_alignments_has_null_alignment_accuracy_and_no_supervised_runs()
  local d = H.tmpdir()
  local file = d .. "/wordrev.lua"
  H.write_file(file, PAIRS_FILE)
  local configs, skipped = compare.grid{task_files = {file}, mechanisms = "dot/soft,additive/soft+sup,rnnenc",
                                        seeds = 1, settings = tiny_settings()}
  lu.assertEquals(#configs, 2)
  lu.assertEquals(configs[1].task, "wordrev")
  lu.assertEquals(skipped[1].mechanism, "additive/soft+sup")
  lu.assertEquals(skipped[1].task, "wordrev")
  lu.assertStrContains(skipped[1].reason, "needs alignments")
  local rows, recs, failures = compare.run{configs = configs, out = d .. "/out", jobs = 1,
                                           skipped = skipped, say = function() end}
  lu.assertEquals(#failures, 0, failures[1] and failures[1].error)
  lu.assertEquals(#recs, 2)
  lu.assertNil(rows[1].alignment_accuracy)
  local json = finished(d .. "/out")
  for id, r in pairs(json) do
    assert_every_field(r, compare.RECORD_FIELDS, id)
    lu.assertEquals(r.alignment_accuracy, compare.null, id)
  end
  local dot = json[configs[1].id]
  lu.assertEquals(type(dot.attention_entropy), "number", "entropy without alignments")
  lu.assertTrue(#dot.heatmap.src[1] > 1, "word tokens label the heatmap")
  local res = util.read_json(d .. "/out/results.json")
  lu.assertEquals(res.results[1].alignment_accuracy, compare.null)
  lu.assertStrContains(H.read_file(d .. "/out/index.html"), "no true alignments")
end

function T.test_a_changed_task_file_makes_new_ids_and_workers_refuse_the_old_content()
  local d = H.tmpdir()
  local file = d .. "/t.lua"
  H.write_file(file, H.read_file(FIXTURE))
  local o = {task_files = {file}, mechanisms = "mine/soft", seeds = 1, settings = tiny_settings()}
  local a = compare.grid(o)
  lu.assertEquals(compare.grid(o)[1].id, a[1].id, "the same file, the same ids")
  H.write_file(file, H.read_file(FIXTURE) .. "-- one more line\n")
  local b = compare.grid(o)
  lu.assertNotEquals(b[1].id, a[1].id)
  lu.assertFalse(compare.same_config(a[1], b[1]))
  lu.assertErrorMsgContains("has changed since this configuration was made",
                            compare.run_config, a[1])
  -- a score registered outside a task file is refused: the workers would not know it
  glimpse.attention.register_score("only_here", {score = function(qq, k) return k:sum(3) end})
  lu.assertErrorMsgContains("registered in this process, not by a task file", compare.grid,
                            {mechanisms = "only_here/soft", tasks = "reversal"})
end

function T.test_the_contract_names_each_mistake()
  local function gen(rng, L) return ("a"):rep(L), "a", {1} end
  local cases = {
    {{name = "x", alphabet = "ab", generate = gen, train_lenghts = {1, 2}},
     "unknown field 'train_lenghts' (did you mean 'train_lengths'?)"},
    {{name = "reversal", alphabet = "ab", generate = gen}, "shipped task's name"},
    {{name = "x", generate = gen}, "needs its alphabet"},
    {{name = "x", alphabet = "ab"}, "give generate"},
    {{name = "x", alphabet = "ab", generate = function(rng, L) return ("a"):rep(L + 1), "a" end},
     "returned a source of 6 tokens"},
    {{name = "x", alphabet = "ab", generate = function(rng, L) return ("c"):rep(L), "a" end},
     "the source has 'c', which is not in the task's alphabet"},
    {{name = "x", alphabet = "ab", generate = function(rng, L) return ("a"):rep(L), "ab", {1} end},
     "one source position per target token (2)"},
    {{name = "x", alphabet = "ab", generate = gen, train_lengths = {9, 3}}, "train_lengths"},
    {{name = "x", pairs = {{"ab", "b", {3}}}}, "alignment entry 1 must be a source position in 0..2"},
  }
  for _, c in ipairs(cases) do lu.assertErrorMsgContains(c[2], compare.define_task, c[1]) end
  -- a generator whose examples disagree about alignments is refused when it is used
  local n = 0
  local t = compare.define_task{name = "flaky", alphabet = "a", generate = function(rng, L)
    n = n + 1
    return ("a"):rep(L), "a", n == 1 and {1} or nil
  end}
  lu.assertErrorMsgContains("lacks an alignment, unlike the task's first example",
                            function() t:train_set(3, 1) end)
  compare.register_task(t)
  lu.assertErrorMsgContains("unknown task 'flaki' (did you mean 'flaky'?) (shipped: reversal, " ..
                            "sorting, dates, lookup, translit, chain; loaded: ",
                            glimpse.data.compare.task, "flaki")
end

function T.test_write_called_from_a_script_fills_its_meta_fields()
  local d = H.tmpdir()
  compare.load_task_file(FIXTURE)
  local configs = compare.grid{tasks = {"swap"}, mechanisms = "mine/soft", seeds = 1,
                               settings = tiny_settings()}
  local r = compare.run_config(configs[1])
  lu.assertNil(r.steps_to_90)
  compare.write(d, compare.summarise({r}), {r})
  local res = util.read_json(d .. "/results.json")
  lu.assertEquals(res.jobs, 1)
  lu.assertTrue(math.abs(res.seconds - r.wall_seconds) < 1e-6)
  lu.assertEquals(res.configurations, 1)
  lu.assertEquals(res.interrupted, false)
  lu.assertEquals(res.results[1].steps_to_90, compare.null)
  local html = H.read_file(d .. "/index.html")
  lu.assertNotStrContains(html, "? seconds")
  lu.assertNotStrContains(html, "? worker")
  lu.assertStrContains(html, "with 1 worker process ")
end

return T
