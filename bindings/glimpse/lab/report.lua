--- glimpse.report -- the one HTML report writer experiments share: a page of headings,
-- paragraphs, tables, pictures, strips of pictures, SVG line charts and attention viewers
-- (page:attention), written atomically as one self-contained index.html (no outside CSS or
-- JS: a page with a viewer carries its script inline and works offline from the file).
--
--   local page = glimpse.report.Page{title = "seq2seq on reversal"}
--   page:chart({{name = "train loss", points = {{1, 2.3}, {100, 0.4}}}}, {xlabel = "step"})
--   page:table({{"score", "accuracy"}, {"additive", 0.98}}, {header = true})
--   page:write("out/seq2seq/index.html")
--
-- The page is at most 1200 px wide; pictures, charts and wide tables scale down or scroll in
-- their own box.  Picture paths are written as given: relative to the page's folder.
local check = require "glimpse.check"
local options = require "glimpse.options"
local util = require "glimpse.util"
local dist = require "glimpse.lab.dist"

local M = {}

local fail = check.fail

--- report.escape(s) -> s with & < > " ' as HTML entities.
function M.escape(s)
  return (tostring(s):gsub("[&<>\"']", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
                                        ['"'] = "&quot;", ["'"] = "&#39;"}))
end
local esc = M.escape

--- report.format_number(x [, fmt]) -> text: integers as they are, other numbers with 4
--- significant digits (or fmt, a string.format pattern); NaN and infinities as "nan",
--- "inf", "-inf".
function M.format_number(x, fmt)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  if fmt then return string.format(fmt, x) end
  if math.type(x) == "integer" then return tostring(x) end
  if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%d", x) end
  return string.format("%.4g", x)
end

local STYLE = [[
*{box-sizing:border-box}
body{font-family:sans-serif;line-height:1.4;max-width:1200px;margin:0 auto;padding:1em 1.5em;
color:#222;overflow-wrap:anywhere}
h1,h2,h3{line-height:1.2}
img,svg{max-width:100%;height:auto}
.strip{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start}
.strip figure{margin:0;max-width:100%}
figure{margin:0.5em 0;max-width:100%}
figcaption{font-size:0.85em;color:#555}
.img-pixel{image-rendering:pixelated}
.tablebox{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:0.5em 0}
th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
th{border-bottom:2px solid #999}
pre{white-space:pre-wrap;background:#f6f6f6;padding:0.6em;max-width:100%}
.chart{max-width:100%}
]]

local Page = {}
Page.__index = Page

Page.options = options.declare("report.Page", {
  {"title", "string", "glimpse report", help = "the page's title and first heading"},
})

--- report.Page{title=} -> an empty page.
setmetatable(Page, {__call = function(_, opts)
  if opts ~= nil and type(opts) ~= "table" then
    fail(2, "report.Page: expected an options table {title=...}")
  end
  local o = Page.options:check(opts, 2)
  return setmetatable({title = o.title, parts = {}}, Page)
end})
M.Page = Page

local function add(self, s)
  self.parts[#self.parts + 1] = s
  return self
end

--- page:heading(text [, level=2]) adds <h1>..<h6>.  Returns the page.
function Page:heading(text, level)
  level = level or 2
  if math.type(level) ~= "integer" or level < 1 or level > 6 then
    fail(2, "page:heading: level must be an integer 1..6, got %s", tostring(level))
  end
  return add(self, string.format("<h%d>%s</h%d>", level, esc(text), level))
end

--- page:paragraph(text) adds a paragraph of plain text (escaped).  Returns the page.
function Page:paragraph(text)
  return add(self, "<p>" .. esc(text) .. "</p>")
end

--- page:pre(text) adds preformatted text (a log excerpt, a command), wrapped to the page.
function Page:pre(text)
  return add(self, "<pre>" .. esc(text) .. "</pre>")
end

--- page:html(s) adds raw HTML, as it is.  Returns the page.
function Page:html(s)
  if type(s) ~= "string" then fail(2, "page:html: expected a string, got %s", type(s)) end
  return add(self, s)
end

local function cell(v, fmt)
  if type(v) == "number" then
    return "<td class=\"num\">" .. esc(M.format_number(v, fmt)) .. "</td>"
  end
  if v == nil then return "<td></td>" end
  return "<td>" .. esc(tostring(v)) .. "</td>"
end

--- page:table(rows, {columns=, header=false, formats={}, caption=}) adds a table.
--- rows: a list of arrays ({"additive", 0.98}), or of records ({score = "additive", acc =
--- 0.98}) with columns naming the keys in order (the header row shows them).  header = true
--- takes the first array row as the header.  formats: string.format patterns by column
--- name or index ({acc = "%.1f"}).  Numbers are right-aligned.  Returns the page.
function Page:table(rows, opts)
  opts = opts or {}
  if type(rows) ~= "table" then fail(2, "page:table: rows must be a list, got %s", type(rows)) end
  local cols, formats = opts.columns, opts.formats or {}
  if cols ~= nil and type(cols) ~= "table" then fail(2, "page:table: columns must be a list of names") end
  local out = {"<div class=\"tablebox\"><table>"}
  if opts.caption then out[#out + 1] = "<caption>" .. esc(opts.caption) .. "</caption>" end
  local first = 1
  local head = cols
  if opts.header then head, first = rows[1], 2 end
  if head then
    local h = {}
    for _, c in ipairs(head) do h[#h + 1] = "<th>" .. esc(c) .. "</th>" end
    out[#out + 1] = "<tr>" .. table.concat(h) .. "</tr>"
  end
  for r = first, #rows do
    local row = rows[r]
    if type(row) ~= "table" then fail(2, "page:table: row %d is a %s, expected a table", r, type(row)) end
    local c = {}
    if cols and #row == 0 then
      for i, name in ipairs(cols) do c[i] = cell(row[name], formats[name] or formats[i]) end
    else
      local n = #row
      if head then n = math.max(n, #head) end
      for i = 1, n do
        local name = head and head[i]
        c[i] = cell(row[i], formats[i] or (name and formats[name]))
      end
    end
    out[#out + 1] = "<tr>" .. table.concat(c) .. "</tr>"
  end
  out[#out + 1] = "</table></div>"
  return add(self, table.concat(out, "\n"))
end

local function figure(path, caption, opts)
  if type(path) ~= "string" or path == "" then
    fail(3, "page:image: path must be a non-empty string, got %s", tostring(path))
  end
  local attrs = ""
  if opts.width then attrs = attrs .. string.format(" width=\"%d\"", opts.width) end
  if opts.pixelated then attrs = attrs .. " class=\"img-pixel\"" end
  local alt = caption or path:match("[^/]*$")
  local s = string.format("<figure><img src=\"%s\" alt=\"%s\"%s>", esc(path), esc(alt), attrs)
  if caption then s = s .. "<figcaption>" .. esc(caption) .. "</figcaption>" end
  return s .. "</figure>"
end

--- page:image(path, {caption=, width=, pixelated=false}) adds one picture (path relative
--- to the page), scaled down to the page width when wider.  Returns the page.
function Page:image(path, opts)
  opts = opts or {}
  return add(self, figure(path, opts.caption, opts))
end

--- page:images(list, {width=, pixelated=false}) adds a strip of pictures that wraps onto
--- more lines instead of running off the page.  list: paths, or {path=, caption=} tables.
--- width: the width (px) each picture is shown at, at most (they still shrink to fit).
function Page:images(list, opts)
  opts = opts or {}
  if type(list) ~= "table" then fail(2, "page:images: expected a list of paths, got %s", type(list)) end
  local out = {"<div class=\"strip\">"}
  for i, item in ipairs(list) do
    if type(item) == "string" then
      out[#out + 1] = figure(item, nil, opts)
    elseif type(item) == "table" then
      out[#out + 1] = figure(item.path, item.caption, opts)
    else
      fail(2, "page:images: entry %d is a %s, expected a path or {path=, caption=}", i, type(item))
    end
  end
  out[#out + 1] = "</div>"
  return add(self, table.concat(out, "\n"))
end

-- ---------------------------------------------------------------------------------------
-- charts

local PALETTE = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"}

-- about n round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten
local function nice_ticks(lo, hi, n)
  if hi <= lo then
    local d = lo == 0 and 1 or math.abs(lo) * 0.1
    lo, hi = lo - d, hi + d
  end
  local raw = (hi - lo) / n
  local p = 10 ^ math.floor(math.log(raw, 10))
  local step = p
  for _, m in ipairs({1, 2, 5, 10}) do
    step = m * p
    if step >= raw then break end
  end
  local first = math.floor(lo / step + 1e-9) * step
  local last = math.ceil(hi / step - 1e-9) * step
  local ticks = {}
  local k = 0
  while first + k * step <= last + step * 1e-9 do
    ticks[#ticks + 1] = first + k * step
    k = k + 1
  end
  return ticks, first, last
end

local function tick_text(v)
  if math.abs(v) < 1e-12 then return "0" end
  return string.format("%.6g", v)
end

-- the (x, y) pairs of a series: {points = {{x, y}, ...}} or {x = {...}, y = {...}};
-- points whose y is nil, NaN or infinite (or not positive on a log axis) are left out
local function series_points(s, i, log_y)
  local pts = {}
  local function keep(x, y)
    if type(x) == "number" and type(y) == "number" and y == y and x == x
       and math.abs(y) ~= math.huge and math.abs(x) ~= math.huge and (not log_y or y > 0) then
      pts[#pts + 1] = {x, log_y and math.log(y, 10) or y}
    end
  end
  if type(s) ~= "table" then fail(3, "chart: series %d is a %s, expected a table", i, type(s)) end
  if s.points then
    for _, p in ipairs(s.points) do keep(p[1], p[2]) end
  elseif s.x and s.y then
    if #s.x ~= #s.y then
      fail(3, "chart: series %d has %d x values and %d y values", i, #s.x, #s.y)
    end
    for k = 1, #s.x do keep(s.x[k], s.y[k]) end
  elseif s.y then
    for k = 1, #s.y do keep(k, s.y[k]) end
  else
    fail(3, "chart: series %d needs points = {{x, y}, ...} or x = {...}, y = {...}", i)
  end
  return pts
end

--- report.chart_svg(series, {title=, xlabel=, ylabel=, width=640, height=360, log_y=false,
---                  ymin=, ymax=}) -> an SVG line chart as text.  series: a list of {name=,
--- points = {{x, y}, ...}} (or x = {...}, y = {...}; or y alone, x = 1, 2, ...), each a
--- line with markers in its own colour, named in the legend.  Axes have round ticks;
--- log_y plots y on a log10 axis (positive values only).
function M.chart_svg(series, opts)
  opts = opts or {}
  if type(series) ~= "table" then fail(2, "chart: series must be a list, got %s", type(series)) end
  if series.points or series.y then series = {series} end
  local W, H = opts.width or 640, opts.height or 360
  local log_y = opts.log_y
  local L, R, T, B = 64, 16, opts.title and 34 or 14, 48
  local lines = {}
  local xlo, xhi, ylo, yhi = math.huge, -math.huge, math.huge, -math.huge
  for i, s in ipairs(series) do
    local pts = series_points(s, i, log_y)
    lines[i] = pts
    for _, p in ipairs(pts) do
      xlo, xhi = math.min(xlo, p[1]), math.max(xhi, p[1])
      ylo, yhi = math.min(ylo, p[2]), math.max(yhi, p[2])
    end
  end
  if xlo > xhi then xlo, xhi, ylo, yhi = 0, 1, 0, 1 end
  if opts.ymin then ylo = log_y and math.log(opts.ymin, 10) or opts.ymin end
  if opts.ymax then yhi = log_y and math.log(opts.ymax, 10) or opts.ymax end
  local xt, x0, x1 = nice_ticks(xlo, xhi, 6)
  local yt, y0, y1
  if log_y then
    y0, y1 = math.floor(ylo), math.ceil(yhi)
    if y1 == y0 then y1 = y0 + 1 end
    yt = {}
    for e = y0, y1 do yt[#yt + 1] = e end
  else
    yt, y0, y1 = nice_ticks(ylo, yhi, 5)
  end
  local pw, ph = W - L - R, H - T - B
  local function px(x) return L + (x - x0) / (x1 - x0) * pw end
  local function py(y) return T + ph - (y - y0) / (y1 - y0) * ph end
  local out = {string.format('<svg class="chart" xmlns="http://www.w3.org/2000/svg" '
                             .. 'width="%d" height="%d" viewBox="0 0 %d %d" '
                             .. 'font-family="sans-serif" font-size="12">', W, H, W, H),
               string.format('<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>', W, H)}
  if opts.title then
    out[#out + 1] = string.format('<text x="%d" y="20" text-anchor="middle" font-size="14">%s</text>',
                                  W // 2, esc(opts.title))
  end
  for _, v in ipairs(xt) do
    local x = px(v)
    out[#out + 1] = string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>'
                                  .. '<text x="%.1f" y="%d" text-anchor="middle">%s</text>',
                                  x, T, x, T + ph, x, T + ph + 16, tick_text(v))
  end
  for _, v in ipairs(yt) do
    local y = py(v)
    local label = log_y and tick_text(10 ^ v) or tick_text(v)
    out[#out + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>'
                                  .. '<text x="%d" y="%.1f" text-anchor="end">%s</text>',
                                  L, y, L + pw, y, L - 6, y + 4, label)
  end
  out[#out + 1] = string.format('<rect x="%d" y="%d" width="%d" height="%d" fill="none" '
                                .. 'stroke="#333"/>', L, T, pw, ph)
  if opts.xlabel then
    out[#out + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">%s</text>',
                                  L + pw / 2, H - 8, esc(opts.xlabel))
  end
  if opts.ylabel then
    out[#out + 1] = string.format('<text x="14" y="%.1f" text-anchor="middle" '
                                  .. 'transform="rotate(-90 14 %.1f)">%s</text>',
                                  T + ph / 2, T + ph / 2, esc(opts.ylabel))
  end
  for i, pts in ipairs(lines) do
    local colour = series[i].color or PALETTE[(i - 1) % #PALETTE + 1]
    local coords = {}
    for k, p in ipairs(pts) do coords[k] = string.format("%.1f,%.1f", px(p[1]), py(p[2])) end
    if #pts > 1 then
      out[#out + 1] = string.format('<polyline fill="none" stroke="%s" stroke-width="2" '
                                    .. 'points="%s"/>', esc(colour), table.concat(coords, " "))
    end
    if #pts <= 40 then
      for _, p in ipairs(pts) do
        out[#out + 1] = string.format('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>',
                                      px(p[1]), py(p[2]), esc(colour))
      end
    end
  end
  -- legend, top right inside the plot
  local ly = T + 8
  for i, s in ipairs(series) do
    if s.name then
      local colour = s.color or PALETTE[(i - 1) % #PALETTE + 1]
      local lx = L + pw - 8 - 8 * math.min(#tostring(s.name), 40) - 24
      out[#out + 1] = string.format('<rect x="%.1f" y="%d" width="14" height="4" fill="%s"/>'
                                    .. '<text x="%.1f" y="%d">%s</text>', lx, ly, esc(colour),
                                    lx + 20, ly + 6, esc(s.name))
      ly = ly + 16
    end
  end
  out[#out + 1] = "</svg>"
  return table.concat(out, "\n")
end

--- page:chart(series, opts) adds an SVG line chart (report.chart_svg's arguments), scaled
--- to the page width.  Returns the page.
function Page:chart(series, opts)
  local ok, svg = pcall(M.chart_svg, series, opts)
  if not ok then fail(2, "page:%s", check.strip(svg)) end
  return add(self, "<figure>" .. svg .. "</figure>")
end

--- page:attention(data, {title=, note=, pictures=}) adds an attention viewer: a heatmap of
--- output tokens (rows) against source tokens (columns) that scrolls rather than shrinks;
--- hovering or clicking an output token colours the source tokens by its weights, hovering
--- a source token colours the outputs; a map selector (layers, mechanisms), a head
--- selector (each head or their mean) and small multiples of every head; with data.image,
--- the image with each word's weights drawn over its grid and a wrapping strip of one
--- picture per word.  data: see glimpse.lab.viewer (docs/api/report.md); title: a heading
--- (default data.title); note: a line under the viewer; pictures: static pictures of the
--- same maps (paths), linked.
Page.attention_options = options.declare("page:attention", {
  {"title", "string", nil, help = "a heading above the viewer (default data.title)"},
  {"note", "string", nil, help = "a line of text under the viewer"},
  {"pictures", "table", nil, help = "static pictures of the same maps (paths), linked"},
})

function Page:attention(data, opts)
  opts = Page.attention_options:check(opts, 2)
  local viewer = require "glimpse.lab.viewer"
  local d = viewer.normalise(data, "page:attention", 2)
  self.viewers = (self.viewers or 0) + 1
  local parts = {viewer.block("gv-" .. self.viewers, d, opts.title or data.title)}
  if opts.note then parts[#parts + 1] = "<p>" .. esc(opts.note) .. "</p>" end
  if opts.pictures and #opts.pictures > 0 then
    local links = {}
    for _, p in ipairs(opts.pictures) do
      links[#links + 1] = string.format('<a href="%s">%s</a>', esc(p), esc(p:match("[^/]*$")))
    end
    parts[#parts + 1] = "<p>Static pictures: " .. table.concat(links, ", ") .. "</p>"
  end
  return add(self, table.concat(parts, "\n"))
end

--- page:render() -> the page as one HTML document (text).
function Page:render()
  local viewer = self.viewers and require "glimpse.lab.viewer"
  return table.concat({
    "<!doctype html>",
    "<html lang=\"en\"><head><meta charset=\"utf-8\">",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    "<title>" .. esc(self.title) .. "</title>",
    "<style>" .. STYLE .. (viewer and viewer.CSS or "") .. "</style></head><body>",
    "<h1>" .. esc(self.title) .. "</h1>",
    table.concat(self.parts, "\n"),
    viewer and ("<script>" .. viewer.JS .. "</script>") or "",
    "</body></html>", ""}, "\n")
end

--- page:write(path) writes the page atomically (temp file + rename).  Returns path.
function Page:write(path)
  if type(path) ~= "string" or path == "" then
    fail(2, "page:write: path must be a non-empty string, got %s", tostring(path))
  end
  -- in a data-parallel run (glimpse.dist) rank 0 alone writes
  if dist.is_root() then util.write_text(path, self:render()) end
  return path
end

return M
