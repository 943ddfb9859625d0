--- glimpse.compare's outputs (part of glimpse.compare; compare/init.lua publishes them):
-- results.json, results.md (a table per task), index.html (the tables, the charts of
-- accuracy against length and of the learning curves, an attention viewer of one test
-- example with a mechanism selector, and a strip of alignment heatmaps).
local util = require "glimpse.util"
local report = require "glimpse.lab.report"
local viz = require "glimpse.plot.viz"
local viewer_data = require "glimpse.lab.viewer_data"
local records = require "glimpse.lab.compare.records"
local summary = require "glimpse.lab.compare.summary"

local P = {}

function P.pct(x) return x and string.format("%.1f", 100 * x) or "-" end
local function pm(m, s) return m and string.format("%.1f ± %.1f", 100 * m, 100 * (s or 0)) or "-" end

local function by_task(rows)
  local order, groups = {}, {}
  for _, r in ipairs(rows) do
    if not groups[r.task] then groups[r.task] = {}; order[#order + 1] = r.task end
    table.insert(groups[r.task], r)
  end
  return order, groups
end

local function table_rows(rows)
  local lengths = rows[1] and rows[1].accuracy_by_length or {}
  local head = {"mechanism", "params", "CPU ms/step", "steps to 90%", "token acc", "long token acc",
                "exact"}
  for _, e in ipairs(lengths) do head[#head + 1] = string.format("@%d", e.length) end
  head[#head + 1] = "align acc"
  head[#head + 1] = "entropy"
  local out = {head}
  for _, r in ipairs(rows) do
    local line = {r.mechanism, math.floor(r.params + 0.5),
                  r.cpu_ms_per_step and string.format("%.1f", r.cpu_ms_per_step) or "-",
                  r.steps_to_90 and string.format("%d (%d/%d)", math.floor(r.steps_to_90 + 0.5),
                                                  r.reached_90, #r.seeds)
                  or string.format("- (0/%d)", #r.seeds),
                  pm(r.accuracy_mean, r.accuracy_std), pm(r.long_accuracy_mean, r.long_accuracy_std),
                  pm(r.exact_mean, r.exact_std)}
    for _, e in ipairs(r.accuracy_by_length) do line[#line + 1] = P.pct(e.token_mean) end
    line[#line + 1] = P.pct(r.alignment_accuracy)
    line[#line + 1] = r.attention_entropy and string.format("%.2f", r.attention_entropy) or "-"
    out[#out + 1] = line
  end
  return out
end

--- compare.markdown(rows, meta) -> the results table(s) as Markdown text, one per task
function P.markdown(rows, meta)
  meta = meta or {}
  local lines = {}
  if meta.command then lines[#lines + 1] = "Command: `" .. meta.command .. "`\n" end
  local order, groups = by_task(rows)
  for _, t in ipairs(order) do
    lines[#lines + 1] = "### " .. t .. "\n"
    local tr = table_rows(groups[t])
    for i, r in ipairs(tr) do
      local cells = {}
      for j, v in ipairs(r) do cells[j] = tostring(v) end
      lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
      if i == 1 then lines[#lines + 1] = "|" .. string.rep("---|", #r) end
    end
    lines[#lines + 1] = ""
  end
  lines[#lines + 1] = "token acc / exact: token and exact-sequence accuracy of greedy decoding, " ..
    "averaged over the test lengths; long: the lengths past training; @L: token accuracy at " ..
    "length L; align acc: share of target steps whose attention argmax is the true source " ..
    "position (teacher forcing); mean ± std over seeds, in %. CPU ms/step: the CPU time " ..
    "of a training step (one thread; wall-clock times are in results.json)."
  return table.concat(lines, "\n") .. "\n"
end

-- more colours than the report's ten, so that the default grid's lines all differ
local COLOURS = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8", "#98df8a", "#ffbb78"}

--- compare.charts(rows, task) -> {{series, opts}, {series, opts}}: the two charts of a task
--- (its summary rows): token accuracy against test length, and the learning curves
--- (validation exact-sequence accuracy against step), one line per mechanism; for
--- page:chart or report.chart_svg
function P.charts(rows, task)
  local acc, curves = {}, {}
  for _, r in ipairs(rows) do
    if r.task == task then
      local pts = {}
      for _, e in ipairs(r.accuracy_by_length) do pts[#pts + 1] = {e.length, e.token_mean} end
      local colour = COLOURS[#acc % #COLOURS + 1]
      acc[#acc + 1] = {name = r.mechanism, points = pts, color = colour}
      curves[#curves + 1] = {name = r.mechanism, points = r.curve, color = colour}
    end
  end
  return {{acc, {title = task .. ": token accuracy against test length",
                 xlabel = "source length", ylabel = "token accuracy", ymin = 0, ymax = 1}},
          {curves, {title = task .. ": validation exact-sequence accuracy (training lengths)",
                    xlabel = "step", ylabel = "exact accuracy", ymin = 0, ymax = 1}}}
end

--- the heatmaps on the page: 2x text (8 px glyphs at scale 2: 16 px rows), cells at least
--- this many px (so row labels never overlap) and a map at least HEATMAP_MIN_GRID px wide
P.HEATMAP_SCALE, P.HEATMAP_CELL, P.HEATMAP_MIN_GRID = 2, 18, 260

--- compare.heatmap_options(heatmap) -> viz.alignment's options for a record's heatmap
--- {alpha, src, tgt}: cells of at least HEATMAP_CELL px, wide enough that the picture is at
--- least 320 px wide, labels at twice the font's size
function P.heatmap_options(h, title)
  local S = math.max(1, #h.src)
  return {title = title, scale = P.HEATMAP_SCALE,
          cell = math.max(P.HEATMAP_CELL, math.ceil(P.HEATMAP_MIN_GRID / S))}
end

--- compare.write_meta(records, meta) -> meta with its defaults filled in: command (this
--- script's command line), seconds (the sum of the records' wall_seconds: one process
--- running them one after another), jobs (1), cpu_seconds (the sum of the records'), date
--- (UTC), configurations (#records), interrupted (false), skipped, failures, missing ({})
function P.write_meta(records_, meta)
  local m = {}
  for k, v in pairs(meta or {}) do m[k] = v end
  local wall, cpu, timed = 0, 0, 0
  for _, r in ipairs(records_) do
    wall = wall + (tonumber(r.wall_seconds) or 0)
    if tonumber(r.cpu_seconds) then cpu, timed = cpu + r.cpu_seconds, timed + 1 end
  end
  if m.command == nil then m.command = util.command_line() end
  if m.seconds == nil then m.seconds, m.seconds_from = wall, "records" end
  if m.jobs == nil then m.jobs = 1 end
  m.cpu_seconds, m.cpu_timed = cpu, timed
  m.date = m.date or os.date("!%Y-%m-%d %H:%M UTC")
  m.configurations = #records_
  m.interrupted = m.interrupted or false
  m.skipped, m.failures, m.missing = m.skipped or {}, m.failures or {}, m.missing or {}
  return m
end

--- compare.write(dir, rows, records, meta) -> paths: results.json, results.md, index.html (SVG
--- charts inline) and heatmaps/*.png.  meta (every field optional, compare.write_meta fills
--- them in): command (the command line shown on the page; default this script's),
--- seconds (the wall time of the run; default the sum of the records' wall_seconds), jobs
--- (worker processes; default 1), skipped ({mechanism=, reason=[, task=]}), failures
--- ({id=, error=}), missing (ids), interrupted (boolean).  results.json holds the rows
--- (every field of compare.ROW_FIELDS, null where there is no value) and the meta fields,
--- with cpu_seconds, date and configurations.
function P.write(dir, rows, records_, meta)
  meta = P.write_meta(records_, meta)
  util.mkdir_p(dir .. "/heatmaps")
  local full = {}
  for i, r in ipairs(rows) do full[i] = records.complete(r, summary.ROW_FIELDS) end
  util.write_json(dir .. "/results.json", {results = full, skipped = meta.skipped,
                                           failures = meta.failures, missing = meta.missing,
                                           command = meta.command or records.null,
                                           seconds = meta.seconds, jobs = meta.jobs,
                                           cpu_seconds = meta.cpu_seconds, date = meta.date,
                                           configurations = meta.configurations,
                                           interrupted = meta.interrupted},
                  {indent = 1})
  util.write_text(dir .. "/results.md", P.markdown(rows, meta))
  local page = report.Page{title = "glimpse compare: attention mechanisms"}
  if meta.command then page:pre(meta.command) end
  page:paragraph(string.format("%d configurations, %.0f seconds of wall time %s with %d " ..
                               "worker process%s (%.0f CPU seconds over the %d configurations " ..
                               "that recorded it), %s. Accuracy is greedy decoding on held-out " ..
                               "sets at each test length; mean ± std over seeds.", #records_,
                               meta.seconds, meta.seconds_from == "records" and
                               "(the configurations' own, one after another)" or "(this call)",
                               meta.jobs, meta.jobs == 1 and "" or "es", meta.cpu_seconds,
                               meta.cpu_timed, meta.date))
  local order, groups = by_task(rows)
  for _, t in ipairs(order) do
    local g = groups[t]
    page:heading("Task: " .. t)
    local tl, tests, aligned = g[1].train_lengths or {5, 20}, {}, false
    for _, e in ipairs(g[1].accuracy_by_length) do tests[#tests + 1] = tostring(e.length) end
    for _, r in ipairs(g) do aligned = aligned or r.alignment_accuracy ~= nil end
    page:paragraph(string.format("Trained on sources of length %d-%d, tested at lengths %s.%s",
                                 tl[1], tl[2], table.concat(tests, ", "), aligned and "" or
                                 " No alignment accuracy: the task has no true alignments " ..
                                 "(or no mechanism here attends)."))
    page:table(table_rows(g), {header = true})
    for _, ch in ipairs(P.charts(g, t)) do page:chart(ch[1], ch[2]) end
    local pics, shown = {}, {}
    for _, rec in ipairs(records_) do
      if rec.task == t and rec.heatmap and rec.seed == g[1].seeds[1] then
        shown[#shown + 1] = rec
        local h = rec.heatmap
        local name = string.format("heatmaps/%s.png", rec.id)
        viz.alignment(h.alpha, h.src, h.tgt, dir .. "/" .. name,
                      P.heatmap_options(h, rec.mechanism))
        pics[#pics + 1] = {path = name, caption = rec.mechanism}
      end
    end
    if #pics > 0 then
      page:heading(string.format("Alignments of one test example (seed %d)",
                                 math.floor(g[1].seeds[1])), 3)
      for _, v in ipairs(viewer_data.compare(shown)) do
        page:attention(v.data, {title = v.title, note = "Choose the mechanism above the map; " ..
                                "hover an output token to see its weights over the source."})
      end
      page:images(pics)
    end
  end
  if meta.skipped and #meta.skipped > 0 then
    page:heading("Skipped")
    local t = {{"mechanism", "task", "reason"}}
    for _, s in ipairs(meta.skipped) do t[#t + 1] = {s.mechanism, s.task or "all", s.reason} end
    page:table(t, {header = true})
  end
  if meta.interrupted then
    page:paragraph("This run was interrupted (Ctrl-C): the configurations it stopped are not " ..
                   "in the tables; the same command runs them again.")
  end
  if meta.missing and #meta.missing > 0 then
    page:paragraph(string.format("%d configurations have no result yet (not run, or still " ..
                                 "running): %s.", #meta.missing, table.concat(meta.missing, ", ")))
  end
  if meta.failures and #meta.failures > 0 then
    page:heading("Failed")
    local t = {{"configuration", "error"}}
    for _, f in ipairs(meta.failures) do t[#t + 1] = {f.id, tostring(f.error):sub(1, 300)} end
    page:table(t, {header = true})
  end
  page:write(dir .. "/index.html")
  return {dir .. "/results.json", dir .. "/results.md", dir .. "/index.html"}
end

return P
