-- scripts/reproduce.lua -- the papers' tables by one command (`make reproduce`): Ptr-Net sort,
-- convex hull and TSP, NTM copy vs LSTM, Show, Attend and Tell soft vs hard, Bahdanau's
-- accuracy against length and Luong's global vs local attention (the last two through the
-- compare harness).  Each run is a script's command on a step budget with seed 1; its
-- numbers go to RESULTS/<table>.json and the page DOC beside the paper's.  A killed run
-- resumes: finished runs (same command) are kept and skipped.  The scripts' outputs go to
-- OUT/<table>/<run>/; each checkpoint (a compare table: its results.json) is kept in
-- MODELS/<table>/<run>.* with a <run>.json (command, commit, rows); the page says how to
-- re-evaluate each (--steps 0 --load).  Each mode has its own folders: full out/reproduce,
-- models/reproduce (in the repository), results/, docs/results.md; --quick
-- out/reproduce-quick (models/, results/ and results.md inside); --tiny out/reproduce-tiny.
-- --verify re-scores the kept checkpoints against the records (make verify).
--
--   glimpse scripts/reproduce.lua --quick                     (make reproduce QUICK=1, minutes;
--                                                              into out/reproduce-quick)
--   glimpse scripts/reproduce.lua                             (make reproduce: hours)
--   glimpse scripts/reproduce.lua --tables pointer_hull,pointer_tsp --quick
--   glimpse scripts/reproduce.lua --verify [--mode quick] [--tables ntm_copy]   (make verify)
--
-- The library under it is glimpse.reproduce (docs/results.md is what it writes).
local experiment = require "glimpse.lab.experiment"
local reproduce = require "glimpse.lab.reproduce"

local parser = experiment.parser("reproduce", "Run the papers' tables and write the results page.",
                                 {out = "out/reproduce"})
parser:flag("--tiny", "seconds per table (the tests): numbers that mean nothing")
experiment.add_flags(parser, reproduce.run_options, {"tables", "runs", "results", "doc"}, {
  tables = {help = "comma list of tables (default: all)"},
  runs = {help = "comma list of run ids (default: all; the others are kept as recorded)"},
  results = {help = "folder of the <table>.json files (default results; --quick, --tiny: " ..
                    "OUT/results)"},
  doc = {help = "the results page (default docs/results.md; --quick, --tiny: OUT/results.md)"}})
parser:option("--exe", "the glimpse executable the runs use (default: this one)")
parser:flag("--list", "list the tables and their runs, run nothing")
parser:flag("--verify", "re-score every kept checkpoint against the records, train nothing " ..
            "(make verify)")
parser:option("--mode", "--verify: whose records, full, quick or tiny (default: full, or " ..
              "--quick / --tiny)"):choices({"full", "quick", "tiny"})
parser:option("--models", "folder of the kept checkpoints (default: full models/reproduce; " ..
              "--quick, --tiny: OUT/models)")
parser:option("--limit-mb", "--verify: the models folder's size limit in MB", "25"):convert(tonumber)
local args = experiment.parse(parser)
if args.tiny and args.quick then parser:error("--tiny and --quick: choose one") end

local ok, tables = pcall(reproduce.select, args.tables)
if not ok then parser:error(require("glimpse.check").strip(tables)) end
-- each mode its own folders: full in out/reproduce, results/ and docs/results.md; quick and
-- tiny in out/reproduce-quick and out/reproduce-tiny (their records and page inside)
local mode = args.mode or args.tiny and "tiny" or args.quick and "quick" or "full"
if args.mode and not args.verify then parser:error("--mode is for --verify (runs: --quick, --tiny)") end
if mode ~= "full" and args.out == "out/reproduce" then args.out = "out/reproduce-" .. mode end
args.results = args.results or (mode == "full" and "results" or args.out .. "/results")
args.doc = args.doc or (mode == "full" and "docs/results.md" or args.out .. "/results.md")
if args.list then
  for _, t in ipairs(tables) do
    local ids = {}
    for _, r in ipairs(t.runs) do ids[#ids + 1] = r.id .. " (" .. r.script .. ")" end
    print(string.format("%-16s %s: %s", t.name, t.title, table.concat(ids, ", ")))
  end
  print(string.format("mode %s: outputs in %s, checkpoints kept in %s, records in %s, page %s",
                      mode, args.out, args.models or reproduce.models_of(mode, args.out),
                      args.results, args.doc))
  return
end
local exe = args.exe or arg[-1] or "build/glimpse"
if args.verify then                       -- re-score what is kept, train nothing
  local vok, report = pcall(reproduce.verify, {mode = mode, out = args.out, results = args.results,
    models = args.models, tables = args.tables, exe = exe, limit_mb = args.limit_mb})
  if not vok then io.stderr:write(require("glimpse.check").strip(report), "\n"); os.exit(1) end
  os.exit(report.ok and 0 or 1)
end
local timer = require("glimpse.util").Timer()
local done, records = pcall(reproduce.run, {mode = mode, out = args.out, results = args.results,
                                            doc = args.doc, tables = args.tables, runs = args.runs,
                                            models = args.models, exe = exe})
if not done then                          -- a bad record, another mode's folder, ^C: one line
  io.stderr:write(require("glimpse.check").strip(records):match("^[^\n]*"), "\n")
  os.exit(tostring(records):find("interrupted", 1, true) and 130 or 1)
end
local counts = {done = 0, failed = 0, interrupted = 0}
for _, t in ipairs(tables) do
  for _, r in pairs(records[t.name].runs) do counts[r.status] = (counts[r.status] or 0) + 1 end
end
print(string.format("reproduce (%s): %d runs done, %d failed, %d interrupted in %.0fs; wrote " ..
                    "%s/*.json and %s", mode, counts.done, counts.failed, counts.interrupted,
                    timer:elapsed(), args.results, args.doc))
if counts.failed + counts.interrupted > 0 then os.exit(1) end
