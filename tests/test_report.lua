-- tests/test_report.lua -- glimpse.report: the HTML it writes (escaping, number formats,
-- tables, charts), and the page as a browser shows it: headless Chromium (Debian package
-- chromium) loads a report with a table, a strip of wide pictures, a 2000 px picture and a
-- chart at a 1280 px window, and a script added by this test records whether every picture
-- loaded (naturalWidth > 0) and whether the page is wider than the window.  Without
-- chromium the browser test fails under CI=true and is skipped (with a message) elsewhere.
local lu = require "luaunit"
local glimpse = require "glimpse"
local report = glimpse.report
local util = glimpse.util
local helpers = require "tests.helpers"

local T = {}

local WINDOW = 1280

local function tmpdir(tag)
  local d = string.format("/tmp/glimpse-test-report-%d-%s", util.pid(), tag)
  os.execute("rm -rf " .. util.shell_quote(d))
  util.mkdir_p(d)
  return d
end

local function count(s, pat)
  return select(2, s:gsub(pat, ""))
end

function T.test_text_is_escaped()
  local page = report.Page{title = "a < b & c"}
  page:heading("<script>")
  page:paragraph("\"quoted\" & 'single'")
  local html = page:render()
  lu.assertStrContains(html, "<title>a &lt; b &amp; c</title>")
  lu.assertStrContains(html, "<h2>&lt;script&gt;</h2>")
  lu.assertStrContains(html, "<p>&quot;quoted&quot; &amp; &#39;single&#39;</p>")
  lu.assertNil(html:find("<script>", 1, true))
end

function T.test_numbers_are_formatted()
  lu.assertEquals(report.format_number(3), "3")
  lu.assertEquals(report.format_number(2.0), "2")
  lu.assertEquals(report.format_number(0.123456), "0.1235")
  lu.assertEquals(report.format_number(0.5, "%.1f"), "0.5")
  lu.assertEquals(report.format_number(0 / 0), "nan")
  lu.assertEquals(report.format_number(math.huge), "inf")
end

function T.test_tables_from_arrays_and_records()
  local page = report.Page{}
  page:table({{"score", "acc"}, {"dot", 0.98765}, {"additive", 1}}, {header = true,
                                                                    formats = {acc = "%.2f"}})
  page:table({{score = "dot", acc = 0.5}}, {columns = {"score", "acc"}})
  local html = page:render()
  lu.assertStrContains(html, "<tr><th>score</th><th>acc</th></tr>")
  lu.assertStrContains(html, "<tr><td>dot</td><td class=\"num\">0.99</td></tr>")
  lu.assertStrContains(html, "<tr><td>additive</td><td class=\"num\">1.00</td></tr>")
  lu.assertStrContains(html, "<tr><td>dot</td><td class=\"num\">0.5</td></tr>")
  lu.assertEquals(count(html, "<table>"), 2)
end

function T.test_chart_has_a_line_per_series_ticks_and_a_legend()
  local svg = report.chart_svg({{name = "train", points = {{1, 2}, {2, 1}, {3, 0.5}}},
                                {name = "valid", x = {1, 3}, y = {2.5, 0 / 0}}},
                               {title = "loss", xlabel = "step", ylabel = "loss"})
  lu.assertEquals(count(svg, "<polyline"), 1)        -- valid keeps one finite point: a marker
  lu.assertEquals(count(svg, "<circle"), 4)
  lu.assertStrContains(svg, ">train</text>")
  lu.assertStrContains(svg, ">valid</text>")
  lu.assertStrContains(svg, ">step</text>")
  lu.assertStrContains(svg, "viewBox=\"0 0 640 360\"")
  lu.assertTrue(count(svg, "text%-anchor=\"end\"") >= 3, "y ticks")
  local log = report.chart_svg({name = "l", y = {100, 10, 1, 0.1}}, {log_y = true})
  lu.assertStrContains(log, ">100</text>")
  lu.assertStrContains(log, ">0.1</text>")
  local ok, err = pcall(report.chart_svg, {{name = "bad"}})
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "chart: series 1 needs points")
end

function T.test_write_is_atomic_and_complete()
  local d = tmpdir("write")
  local page = report.Page{title = "t"}
  page:paragraph("hello")
  lu.assertEquals(page:write(d .. "/index.html"), d .. "/index.html")
  local html = util.read_text(d .. "/index.html")
  lu.assertStrContains(html, "<p>hello</p>")
  lu.assertStrContains(html, "</html>")
  local ls = io.popen("ls " .. d):read("a")
  lu.assertEquals(ls, "index.html\n")              -- no temp file left behind
end

-- ---------------------------------------------------------------------------------------
-- the page in a browser

-- a page with everything that could run off the side
local function write_page(d)
  for i = 1, 6 do
    local img = glimpse.rand(3, 40, 300)
    glimpse.image.save(string.format("%s/strip_%d.png", d, i), img)
  end
  glimpse.image.save(d .. "/wide.png", glimpse.rand(3, 30, 2000))
  local page = report.Page{title = "browser check"}
  page:heading("Results")
  page:paragraph(string.rep("averyveryverylongwordwithoutanyspaces", 20))
  local rows = {{"score", "mode", "accuracy", "loss", "steps", "seconds", "note"}}
  for i = 1, 5 do
    rows[#rows + 1] = {"additive", "soft", 0.9 + i / 100, 1 / i, 1000 * i, 12.5 * i,
                       "a longer note about this run " .. i}
  end
  page:table(rows, {header = true})
  local strip = {}
  for i = 1, 6 do strip[i] = {path = string.format("strip_%d.png", i), caption = "map " .. i} end
  page:images(strip)
  page:image("wide.png", {caption = "a 2000 px picture"})
  local a, b = {}, {}
  for s = 1, 50 do a[s] = {s * 10, 2 / s} b[s] = {s * 10, 1.5 / s + 0.1} end
  page:chart({{name = "train", points = a}, {name = "valid", points = b}},
             {title = "learning curve", xlabel = "step", ylabel = "loss", width = 1600})
  page:html(helpers.BROWSER_CHECK)
  return page:write(d .. "/index.html")
end

function T.test_page_in_headless_chromium_loads_every_image_and_fits_1280px()
  local d = tmpdir("browser")
  local c = helpers.browser_check(write_page(d), WINDOW)
  lu.assertEquals(c.images, 7, c.line)
  lu.assertEquals(c.broken, 0, c.line)
  lu.assertEquals(c.inner, WINDOW, c.line)
  lu.assertTrue(c.scroll <= WINDOW, c.line)
  lu.assertTrue(c.body <= WINDOW, c.line)
end

return T
