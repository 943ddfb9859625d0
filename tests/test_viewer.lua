-- tests/test_viewer.lua -- the report's attention viewer (page:attention, glimpse.lab.viewer):
-- its input checks and JSON, and the viewer as headless Chromium (Debian package chromium)
-- runs it.  A self-test script added at the end of the page (tests/helpers' dump_dom)
-- dispatches mouseover on an output token (and a caption word), switches the head and map
-- selectors, hovers a source token, and writes what the page then shows (the weights of
-- the highlighted source tokens or image cells, of the output tokens, the grid's scroll box,
-- the page's width) into the DOM; the test compares them with the maps embedded in the page.
-- Pages: one written here (two layers, one of 4 heads; 200 tokens; a caption over an
-- image), and those scripts/seq2seq.lua, scripts/compare.lua and scripts/caption.lua write
-- with tiny settings.  A copy of the page with the viewer broken (each output token
-- highlighting the first row) must fail the same checks.
local lu = require "luaunit"
local glimpse = require "glimpse"
local H = require "tests.helpers"
local util = glimpse.util
local viewer = require "glimpse.lab.viewer"

local T = {}

local WINDOW = 1280

local SELFTEST = [[
<script>
(function(){
var out={body:document.body.scrollWidth,doc:document.documentElement.scrollWidth,inner:innerWidth,viewers:[]};
function vals(list){return Array.prototype.map.call(list,function(e){return e.dataset.w===undefined?null:+e.dataset.w;});}
function hover(e){e.dispatchEvent(new MouseEvent("mouseover",{bubbles:true}));}
document.querySelectorAll(".gv").forEach(function(root){
  var r={ready:root.dataset.ready||"",error:root.dataset.error||""};
  var outs=root.querySelectorAll(".gv-tgt span"),src=root.querySelectorAll(".gv-src-toks span");
  var rects=root.querySelectorAll(".gv-image rect");
  function read(){return rects.length?vals(rects):vals(src);}
  r.heads=root.querySelectorAll(".gv-heads canvas").length;
  r.thumbs=root.querySelectorAll(".gv-thumb").length;
  var i=Math.min(1,outs.length-1);r.row=i;
  if(outs.length){hover(outs[i]);r.hover=read();}
  var hs=root.querySelector("select.gv-head");
  if(hs&&hs.options.length>1){hs.value="0";hs.dispatchEvent(new Event("change"));hover(outs[i]);r.head1=read();}
  var ls=root.querySelector("select.gv-layer");
  if(ls&&ls.options.length>1){ls.value=String(ls.options.length-1);ls.dispatchEvent(new Event("change"));
    hover(outs[i]);r.last=read();}
  if(src.length){var j=Math.min(2,src.length-1);r.col=j;hover(src[j]);r.back=vals(outs);}
  var sc=root.querySelector(".gv-scroll");
  if(sc)r.scroll=[sc.clientWidth,sc.scrollWidth,sc.clientHeight,sc.scrollHeight];
  var cell=root.querySelector(".gv-cell");if(cell)r.cell=cell.getBoundingClientRect().width;
  var st=root.querySelector(".gv-strip");if(st)r.strip=[st.clientWidth,st.scrollWidth,st.clientHeight];
  out.viewers.push(r);});
var pre=document.createElement("pre");pre.id="gv-check";document.body.appendChild(pre);
var tries=0;
(function wait(){   // the viewer sets data-img once its image has loaded
  var all=document.querySelectorAll(".gv"),done=true;
  out.viewers.forEach(function(r,k){if(all[k].querySelector(".gv-image")){r.img=+(all[k].dataset.img||0);
    done=done&&r.img>0;}});
  pre.textContent=JSON.stringify(out);if(!done&&++tries<40)setTimeout(wait,50);})();
})();
</script>
]]

-- what the page shows after the self-test's events, and the viewers' embedded data
local function run_check(page)
  local dom = H.dump_dom(page, WINDOW, SELFTEST)
  local json = dom:match('<pre id="gv%-check">(.-)</pre>')
  lu.assertNotNil(json, "the self-test wrote nothing: " .. dom:sub(1, 400))
  json = json:gsub("&lt;", "<"):gsub("&gt;", ">"):gsub("&amp;", "&")
  local data = {}
  for block in H.read_file(page):gmatch('<script type="application/json" class="gv%-data">(.-)</script>') do
    data[#data + 1] = util.json_decode(block)
  end
  return util.json_decode(json), data
end

-- the row (or column) the viewer should show: map m's head h (nil: the mean of the heads)
local function row_of(m, h, i)
  local out = {}
  for s = 1, #m.map[1][i] do
    local x = 0
    if h then x = m.map[h][i][s] else
      for k = 1, m.heads do x = x + m.map[k][i][s] end
      x = x / m.heads
    end
    out[s] = x
  end
  return out
end
local function col_of(m, j)
  local out = {}
  for t = 1, #m.map[1] do
    local x = 0
    for k = 1, m.heads do x = x + m.map[k][t][j] end
    out[t] = x / m.heads
  end
  return out
end

local function same(got, want, what)
  if type(got) ~= "table" or #got ~= #want then
    return false, string.format("%s: %s values for %d", what, type(got) == "table" and #got or "no", #want)
  end
  for k = 1, #want do
    if type(got[k]) ~= "number" or math.abs(got[k] - want[k]) > 2e-4 then
      return false, string.format("%s: value %d is %s, the map says %.4f", what, k,
                                  tostring(got[k]), want[k])
    end
  end
  return true
end

-- every viewer's readings against its data: true, or false and the first difference
local function verify(r, data)
  if #r.viewers ~= #data then return false, #r.viewers .. " viewers for " .. #data .. " maps" end
  for v, got in ipairs(r.viewers) do
    local d = data[v]
    if got.ready ~= "1" then return false, "viewer " .. v .. " failed: " .. got.error end
    local i = got.row + 1
    local m1, mn = d.maps[1], d.maps[#d.maps]
    local checks = {{got.hover, row_of(m1, nil, i), "hovered output row"}}
    if m1.heads > 1 then
      checks[#checks + 1] = {got.head1, row_of(m1, 1, i), "head 1"}
      if got.heads ~= m1.heads then return false, "head view: " .. got.heads .. " heads" end
    end
    if #d.maps > 1 then checks[#checks + 1] = {got.last, row_of(mn, nil, i), "last map"} end
    if got.col then checks[#checks + 1] = {got.back, col_of(mn, got.col + 1), "hovered source"} end
    for _, c in ipairs(checks) do
      local ok, why = same(c[1], c[2], string.format("viewer %d %s", v, c[3]))
      if not ok then return false, why end
    end
  end
  return true
end

local function assert_fits(r)
  lu.assertEquals(r.inner, WINDOW)
  lu.assertTrue(r.body <= WINDOW and r.doc <= WINDOW,
                string.format("the page is %d px wide (body %d) in a %d px window", r.doc, r.body, WINDOW))
end

-- ---------------------------------------------------------------------------------------
-- input

local function tokens(prefix, n)
  local t = {}
  for k = 1, n do t[k] = prefix .. k end
  return t
end

function T.test_input_is_checked_with_the_sizes_named()
  local page = glimpse.report.Page{}
  local ok, err = pcall(page.attention, page, {src = {"a", "b"}, tgt = {"x"},
                                               maps = {{name = "l", map = {{0.5, 0.2, 0.3}}}}})
  lu.assertFalse(ok)
  lu.assertStrContains(err, "page:attention: maps[1] (l) row 1 has 3 columns for 2 source positions")
  ok, err = pcall(page.attention, page, {src = "ab", tgt = "xy", maps = {{map = {{1, 0}}}}})
  lu.assertStrContains(err, "maps[1] (nil) has 1 rows for 2 output tokens")
  ok, err = pcall(page.attention, page, {src = "ab", tgt = "x", maps = {{heads = 2, map = {{1, 0}}}}})
  lu.assertStrContains(err, "maps[1] says heads = 2 but its map has 1")
  ok, err = pcall(page.attention, page, {src = "ab", tgt = "x", maps = {{map = {{1, 0}}}}, chosen = {3}})
  lu.assertStrContains(err, "chosen[1] = 3 is not a source position 1..2")
  ok, err = pcall(page.attention, page, {src = "abc", tgt = "x", maps = {{map = {{1, 0, 0}}}},
                                         image = {path = "i.png", grid = {2, 2}}})
  lu.assertStrContains(err, "3 source positions but the image grid is 2x2")
  ok, err = pcall(page.attention, page, {src = "ab", tgt = "x", maps = {}})
  lu.assertStrContains(err, "maps must be a non-empty list")
  ok, err = pcall(page.attention, page, {src = "ab", tgt = "x", maps = {{map = {{1, 0}}}}},
                  {titel = "t"})
  lu.assertStrContains(err, "page:attention: unknown option 'titel' (did you mean 'title'?")
end

function T.test_data_is_json_that_cannot_close_its_script_block()
  local page = glimpse.report.Page{}
  page:attention({src = {"</script><b>", "b"}, tgt = {"x"}, maps = {{map = {{0.25, 0.75}}}}})
  local html = page:render()
  lu.assertNil(html:find("</script><b>", 1, true))
  local block = html:match('<script type="application/json" class="gv%-data">(.-)</script>')
  local d = util.json_decode(block)
  lu.assertEquals(d.src[1], "</script><b>")
  lu.assertEquals(d.maps[1].map, {{{0.25, 0.75}}})          -- (heads, T, S)
  lu.assertEquals(d.vmax, 1)
end

function T.test_captured_maps_map_onto_the_input_in_a_line()
  -- glimpse.attention.capture's shape: maps keyed by module path, (B,heads,T,S) or (B,T,S)
  local maps = {["decoder.layers.2.cross_attn"] = glimpse.softmax(glimpse.randn(2, 4, 3, 5), 4),
                ["decoder.layers.1.cross_attn"] = glimpse.softmax(glimpse.randn(2, 3, 5), 3)}
  local list = viewer.from_maps(maps, 2)
  lu.assertEquals(#list, 2)
  lu.assertEquals(list[1].name, "decoder.layers.1.cross_attn")
  lu.assertEquals(list[1].heads, 1)
  lu.assertEquals(list[2].heads, 4)
  local d = viewer.normalise({src = tokens("s", 5), tgt = tokens("t", 3), maps = list})
  lu.assertEquals(#d.maps[2].map, 4)
  lu.assertAlmostEquals(d.maps[2].map[3][2][4], maps["decoder.layers.2.cross_attn"][2][3][2][4]:item(), 1e-4)
end

-- ---------------------------------------------------------------------------------------
-- in the browser

local function write_page(d)
  glimpse.manual_seed(7)
  local page = glimpse.report.Page{title = "viewer test"}
  page:attention({src = tokens("s", 7), tgt = tokens("t", 5), maps = {
    {name = "decoder.layers.1.cross_attn", heads = 4, map = glimpse.softmax(glimpse.randn(4, 5, 7), 3)},
    {name = "decoder.layers.2.cross_attn", map = glimpse.softmax(glimpse.randn(5, 7) * 2, 2)}}},
    {title = "two layers"})
  page:attention({src = tokens("w", 200), tgt = tokens("o", 200),
                  maps = {{name = "long", map = glimpse.softmax(glimpse.randn(200, 200) * 3, 2)}}},
                 {title = "200 tokens"})
  glimpse.image.save(d .. "/img.png", glimpse.rand(3, 32, 48))
  page:attention({tgt = tokens("word", 24), maps = {{map = glimpse.softmax(glimpse.randn(24, 6) * 2, 2)}},
                  image = {path = "img.png", grid = {2, 3}}}, {title = "caption"})
  return page:write(d .. "/index.html")
end

function T.test_hovering_highlights_the_right_map_and_the_page_fits_1280px()
  local d = H.tmpdir()
  local page = write_page(d)
  local r, data = run_check(page)
  lu.assertEquals(#data, 3)
  lu.assertTrue(verify(r, data))
  assert_fits(r)
  local two, long, cap = r.viewers[1], r.viewers[2], r.viewers[3]
  lu.assertEquals(two.heads, 4)                          -- small multiples of the 4 heads
  -- 200 tokens: 18 px cells in a box that scrolls both ways
  lu.assertEquals(long.cell, 18)
  lu.assertTrue(long.scroll[2] > long.scroll[1] + 2000, "200 columns scroll: " .. table.concat(long.scroll, ","))
  lu.assertTrue(long.scroll[4] > long.scroll[3], "200 rows scroll")
  lu.assertTrue(long.scroll[1] <= WINDOW)
  -- the caption: the word's map over the image's 6 cells, a strip of 24 words that wraps
  lu.assertEquals(#cap.hover, 6)
  lu.assertEquals(cap.thumbs, 24)
  lu.assertEquals(cap.img, 48)
  lu.assertTrue(cap.strip[2] <= cap.strip[1] and cap.strip[3] > 300, "the strip wraps onto rows")
end

function T.test_a_broken_viewer_fails_the_checks()
  local d = H.tmpdir()
  local html = H.read_file(write_page(d))
  -- show(t), the first of the two places that paint with a[t][s], paints row 0 instead
  local broken, n = html:gsub("paint%(e,a%[t%]%[s%]%)", "paint(e,a[0][s])", 1)
  lu.assertEquals(n, 1, "the viewer's script changed: update this test")
  H.write_file(d .. "/broken.html", broken)
  local r, data = run_check(d .. "/broken.html")
  local ok, why = verify(r, data)
  lu.assertFalse(ok)
  lu.assertStrContains(why, "hovered output row")
end

-- ---------------------------------------------------------------------------------------
-- the scripts' pages

local function script(name, flags)
  local exe = arg and arg[-1] or "build/glimpse"
  local ok, _, out = H.run(string.format("%s scripts/%s %s", H.sh_quote(exe), name, flags))
  lu.assertTrue(ok, out)
end

function T.test_seq2seq_page_viewer()
  local d = H.tmpdir()
  script("seq2seq.lua", "--steps 4 --eval-every 2 --train 64 --valid 8 --max-len 6 --batch 8 " ..
         "--emb 8 --hidden 16 --attn-hidden 8 --maps 2 --out " .. H.sh_quote(d))
  local r, data = run_check(d .. "/index.html")
  lu.assertEquals(#data, 2)
  lu.assertTrue(verify(r, data))
  assert_fits(r)
  lu.assertStrContains(H.read_file(d .. "/index.html"), '<a href="alignment_1.png">')
end

-- --model transformer: besides the decode's viewers, the captured maps of every layer and
-- head (cross-attention, decoder and encoder self-attention), a layer and a head selector each
function T.test_seq2seq_transformer_page_shows_every_layer_and_head()
  local d = H.tmpdir()
  script("seq2seq.lua", "--model transformer --positions rope --d 16 --heads 2 --layers 2 " ..
         "--ff 16 --steps 4 --eval-every 2 --train 64 --valid 8 --max-len 6 --batch 8 " ..
         "--maps 1 --out " .. H.sh_quote(d))
  local r, data = run_check(d .. "/index.html")
  lu.assertEquals(#data, 4)                  -- the decode's, then cross, decoder self, encoder self
  local names = {}
  for v = 2, 4 do
    lu.assertEquals(#data[v].maps, 2)        -- two layers
    lu.assertEquals(data[v].maps[1].heads, 2)
    lu.assertEquals(r.viewers[v].heads, 2)   -- the head view
    lu.assertNotNil(r.viewers[v].last, "no layer selector")
    for _, m in ipairs(data[v].maps) do names[#names + 1] = m.name end
  end
  lu.assertEquals(names, {"decoder.0.multihead_attn", "decoder.1.multihead_attn",
                          "decoder.0.self_attn", "decoder.1.self_attn",
                          "encoder.0.self_attn", "encoder.1.self_attn"})
  lu.assertEquals(#data[4].src, #data[4].tgt)  -- source over source
  lu.assertTrue(verify(r, data))
  assert_fits(r)
end

function T.test_compare_page_viewer_selects_mechanisms()
  local d = H.tmpdir() .. "/cmp"
  script("compare.lua", "--mechanisms dot/soft,additive/soft,rnnenc --tasks lookup --seeds 1 " ..
         "--steps 4 --eval-every 2 --train-n 32 --valid-n 4 --test-n 4 --test-lengths 8,24 " ..
         "--hidden 8 --jobs 1 --out " .. H.sh_quote(d))
  local r, data = run_check(d .. "/index.html")
  lu.assertEquals(#data, 1)
  lu.assertEquals(#data[1].maps, 2)                     -- dot/soft and additive/soft
  lu.assertNotNil(r.viewers[1].last, "no mechanism selector")
  lu.assertTrue(verify(r, data))
  assert_fits(r)
end

function T.test_caption_page_viewer_shows_each_word_over_the_image()
  local d = H.tmpdir()
  script("caption.lua", "--train 96 --valid 16 --test 16 --steps 4 --eval-every 2 --batch 16 " ..
         "--embed 8 --hidden 16 --att 8 --channels 4,8,8 --overlays 2 --beam 2 --out " .. H.sh_quote(d))
  local r, data = run_check(d .. "/index.html")
  lu.assertEquals(#data, 2)
  lu.assertTrue(verify(r, data))
  assert_fits(r)
  for v, got in ipairs(r.viewers) do
    lu.assertEquals(#got.hover, #data[v].src)             -- the image grid's cells
    lu.assertTrue(got.img > 0, "image_" .. v .. ".png did not load")
    lu.assertEquals(got.thumbs, #data[v].tgt)
  end
end

return T
