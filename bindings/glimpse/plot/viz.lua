--- glimpse.viz -- pictures of attention: alignment heatmaps with token labels, as PNG (through
-- glimpse.image.save) or SVG, and text drawn into images with a built-in bitmap font.
--
--   local viz = glimpse.viz
--   viz.alignment(alpha, {"1","2","3"}, {"3","2","1","<end>"}, "align.png")  -- alpha (T_tgt,T_src)
--   viz.alignment(alpha, "123", "321", "align.svg")                         -- SVG by extension
--   local img = viz.draw_text(glimpse.ones(3, 20, 80), "hello", 2, 2)        -- (3,H,W) in [0,1]
--
-- Rows of the map are target tokens (labelled on the left), columns source tokens (labelled
-- along the top: horizontally when every token fits its column, else written upwards).
-- Labels never overlap: when the cells are smaller than a line of text, every k-th row or
-- column is labelled (the first always).  A picture is at least MIN_WIDTH (320) px wide
-- (the cells grow, up to 40 px, then the margin) and has a colour bar: viridis from vmin
-- (0) to vmax (1) by default, the scale glimpse.report's attention viewer uses too.
-- The font is our own 5x8 bitmap (printable ASCII; other bytes draw as '?'), drawn at an
-- integer scale.
local glimpse = require "glimpse"

local M = {}

-- ---------------------------------------------------------------------------------------
-- the font: 8 rows of 5 pixels per glyph, '#' on; rows 1-7 hold capitals and digits, row 8
-- the descenders of g j p q y , ;

local GLYPH_W, GLYPH_H = 5, 8

local FONT = {
  [" "] = "..... ..... ..... ..... ..... ..... ..... .....",
  ["!"] = "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#.. .....",
  ['"'] = ".#.#. .#.#. .#.#. ..... ..... ..... ..... .....",
  ["#"] = ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#. .....",
  ["$"] = "..#.. .#### #.#.. .###. ..#.# ####. ..#.. .....",
  ["%"] = "##... ##..# ...#. ..#.. .#... #..## ...## .....",
  ["&"] = ".##.. #..#. #.#.. .#... #.#.# #..#. .##.# .....",
  ["'"] = "..#.. ..#.. ..#.. ..... ..... ..... ..... .....",
  ["("] = "...#. ..#.. .#... .#... .#... ..#.. ...#. .....",
  [")"] = ".#... ..#.. ...#. ...#. ...#. ..#.. .#... .....",
  ["*"] = "..... ..#.. #.#.# .###. #.#.# ..#.. ..... .....",
  ["+"] = "..... ..#.. ..#.. ##### ..#.. ..#.. ..... .....",
  [","] = "..... ..... ..... ..... ..... .##.. ..#.. .#...",
  ["-"] = "..... ..... ..... ##### ..... ..... ..... .....",
  ["."] = "..... ..... ..... ..... ..... .##.. .##.. .....",
  ["/"] = "..... ....# ...#. ..#.. .#... #.... ..... .....",
  ["0"] = ".###. #...# #..## #.#.# ##..# #...# .###. .....",
  ["1"] = "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###. .....",
  ["2"] = ".###. #...# ....# ...#. ..#.. .#... ##### .....",
  ["3"] = "##### ...#. ..#.. ...#. ....# #...# .###. .....",
  ["4"] = "...#. ..##. .#.#. #..#. ##### ...#. ...#. .....",
  ["5"] = "##### #.... ####. ....# ....# #...# .###. .....",
  ["6"] = "..##. .#... #.... ####. #...# #...# .###. .....",
  ["7"] = "##### ....# ...#. ..#.. .#... .#... .#... .....",
  ["8"] = ".###. #...# #...# .###. #...# #...# .###. .....",
  ["9"] = ".###. #...# #...# .#### ....# ...#. .##.. .....",
  [":"] = "..... .##.. .##.. ..... .##.. .##.. ..... .....",
  [";"] = "..... .##.. .##.. ..... .##.. ..#.. .#... .....",
  ["<"] = "...#. ..#.. .#... #.... .#... ..#.. ...#. .....",
  ["="] = "..... ..... ##### ..... ##### ..... ..... .....",
  [">"] = ".#... ..#.. ...#. ....# ...#. ..#.. .#... .....",
  ["?"] = ".###. #...# ....# ...#. ..#.. ..... ..#.. .....",
  ["@"] = ".###. #...# ....# .##.# #.#.# #.#.# .###. .....",
  ["A"] = ".###. #...# #...# ##### #...# #...# #...# .....",
  ["B"] = "####. #...# #...# ####. #...# #...# ####. .....",
  ["C"] = ".###. #...# #.... #.... #.... #...# .###. .....",
  ["D"] = "###.. #..#. #...# #...# #...# #..#. ###.. .....",
  ["E"] = "##### #.... #.... ####. #.... #.... ##### .....",
  ["F"] = "##### #.... #.... ####. #.... #.... #.... .....",
  ["G"] = ".###. #...# #.... #.### #...# #...# .#### .....",
  ["H"] = "#...# #...# #...# ##### #...# #...# #...# .....",
  ["I"] = ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###. .....",
  ["J"] = "..### ...#. ...#. ...#. ...#. #..#. .##.. .....",
  ["K"] = "#...# #..#. #.#.. ##... #.#.. #..#. #...# .....",
  ["L"] = "#.... #.... #.... #.... #.... #.... ##### .....",
  ["M"] = "#...# ##.## #.#.# #.#.# #...# #...# #...# .....",
  ["N"] = "#...# #...# ##..# #.#.# #..## #...# #...# .....",
  ["O"] = ".###. #...# #...# #...# #...# #...# .###. .....",
  ["P"] = "####. #...# #...# ####. #.... #.... #.... .....",
  ["Q"] = ".###. #...# #...# #...# #.#.# #..#. .##.# .....",
  ["R"] = "####. #...# #...# ####. #.#.. #..#. #...# .....",
  ["S"] = ".#### #.... #.... .###. ....# ....# ####. .....",
  ["T"] = "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. .....",
  ["U"] = "#...# #...# #...# #...# #...# #...# .###. .....",
  ["V"] = "#...# #...# #...# #...# #...# .#.#. ..#.. .....",
  ["W"] = "#...# #...# #...# #.#.# #.#.# #.#.# .#.#. .....",
  ["X"] = "#...# #...# .#.#. ..#.. .#.#. #...# #...# .....",
  ["Y"] = "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#.. .....",
  ["Z"] = "##### ....# ...#. ..#.. .#... #.... ##### .....",
  ["["] = ".###. .#... .#... .#... .#... .#... .###. .....",
  ["\\"] = "..... #.... .#... ..#.. ...#. ....# ..... .....",
  ["]"] = ".###. ...#. ...#. ...#. ...#. ...#. .###. .....",
  ["^"] = "..#.. .#.#. #...# ..... ..... ..... ..... .....",
  ["_"] = "..... ..... ..... ..... ..... ..... ##### .....",
  ["`"] = ".#... ..#.. ..... ..... ..... ..... ..... .....",
  ["a"] = "..... ..... .###. ....# .#### #...# .#### .....",
  ["b"] = "#.... #.... #.##. ##..# #...# #...# ####. .....",
  ["c"] = "..... ..... .###. #.... #.... #...# .###. .....",
  ["d"] = "....# ....# .##.# #..## #...# #...# .#### .....",
  ["e"] = "..... ..... .###. #...# ##### #.... .###. .....",
  ["f"] = "..##. .#..# .#... ###.. .#... .#... .#... .....",
  ["g"] = "..... ..... .#### #...# #...# .#### ....# .###.",
  ["h"] = "#.... #.... #.##. ##..# #...# #...# #...# .....",
  ["i"] = "..#.. ..... .##.. ..#.. ..#.. ..#.. .###. .....",
  ["j"] = "...#. ..... ..##. ...#. ...#. ...#. #..#. .##..",
  ["k"] = "#.... #.... #..#. #.#.. ##... #.#.. #..#. .....",
  ["l"] = ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###. .....",
  ["m"] = "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.# .....",
  ["n"] = "..... ..... #.##. ##..# #...# #...# #...# .....",
  ["o"] = "..... ..... .###. #...# #...# #...# .###. .....",
  ["p"] = "..... ..... ####. #...# #...# ####. #.... #....",
  ["q"] = "..... ..... .#### #...# #...# .#### ....# ....#",
  ["r"] = "..... ..... #.##. ##..# #.... #.... #.... .....",
  ["s"] = "..... ..... .###. #.... .###. ....# ####. .....",
  ["t"] = ".#... .#... ###.. .#... .#... .#..# ..##. .....",
  ["u"] = "..... ..... #...# #...# #...# #..## .##.# .....",
  ["v"] = "..... ..... #...# #...# #...# .#.#. ..#.. .....",
  ["w"] = "..... ..... #...# #...# #.#.# #.#.# .#.#. .....",
  ["x"] = "..... ..... #...# .#.#. ..#.. .#.#. #...# .....",
  ["y"] = "..... ..... #...# #...# #...# .#### ....# .###.",
  ["z"] = "..... ..... ##### ...#. ..#.. .#... ##### .....",
  ["{"] = "...#. ..#.. ..#.. .#... ..#.. ..#.. ...#. .....",
  ["|"] = "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. .....",
  ["}"] = ".#... ..#.. ..#.. ...#. ..#.. ..#.. .#... .....",
  ["~"] = "..... ..... .#... #.#.# ...#. ..... ..... .....",
}

-- glyph -> list of {row, col} pixels that are on (0-based), built once
local PIXELS = {}
for ch, rows in pairs(FONT) do
  local on, r = {}, 0
  for row in rows:gmatch("%S+") do
    for c = 1, GLYPH_W do
      if row:sub(c, c) == "#" then on[#on + 1] = {r, c - 1} end
    end
    r = r + 1
  end
  assert(r == GLYPH_H, "viz: glyph " .. ch .. " has " .. r .. " rows")
  PIXELS[ch] = on
end

--- viz.text_width(s, scale) -> pixels the string takes when drawn (one blank column between
--- glyphs).
function M.text_width(s, scale)
  scale = scale or 1
  local n = #s
  if n == 0 then return 0 end
  return (n * (GLYPH_W + 1) - 1) * scale
end

--- viz.text_height(scale) -> pixels of a line of text.
function M.text_height(scale) return GLYPH_H * (scale or 1) end

-- ---------------------------------------------------------------------------------------
-- a canvas: three flat Lua arrays, drawn into, then turned into a (3,H,W) tensor

local Canvas = {}
Canvas.__index = Canvas

local function canvas(w, h, rgb)
  local c = setmetatable({w = w, h = h, r = {}, g = {}, b = {}}, Canvas)
  local r0, g0, b0 = rgb[1], rgb[2], rgb[3]
  local R, G, B = c.r, c.g, c.b
  for i = 1, w * h do R[i], G[i], B[i] = r0, g0, b0 end
  return c
end

function Canvas:rect(x, y, w, h, rgb)
  local x0, y0 = math.max(0, x), math.max(0, y)
  local x1, y1 = math.min(self.w, x + w), math.min(self.h, y + h)
  local R, G, B = self.r, self.g, self.b
  local r0, g0, b0 = rgb[1], rgb[2], rgb[3]
  for yy = y0, y1 - 1 do
    local base = yy * self.w
    for xx = x0, x1 - 1 do
      local i = base + xx + 1
      R[i], G[i], B[i] = r0, g0, b0
    end
  end
end

-- Text with its top-left at (x, y); vertical = true writes it upwards (rotated 90 degrees
-- counter-clockwise) with (x, y) the top-left of the rotated box.
function Canvas:text(s, x, y, scale, rgb, vertical)
  local adv = (GLYPH_W + 1) * scale
  local len = M.text_width(s, scale)
  for k = 1, #s do
    local on = PIXELS[s:sub(k, k)] or PIXELS["?"]
    local off = (k - 1) * adv
    for _, p in ipairs(on) do
      local gx, gy = p[2] * scale + off, p[1] * scale
      if vertical then
        -- glyph x runs up from the bottom, glyph y runs right
        self:rect(x + gy, y + len - 1 - gx - (scale - 1), scale, scale, rgb)
      else
        self:rect(x + gx, y + gy, scale, scale, rgb)
      end
    end
  end
end

function Canvas:tensor()
  return glimpse.tensor({self.r, self.g, self.b}):reshape(3, self.h, self.w)
end

local function from_tensor(img)
  local C, H, W = img.shape[1], img.shape[2], img.shape[3]
  local flat = img:reshape(C, H * W):totable()
  local c = setmetatable({w = W, h = H}, Canvas)
  c.r = flat[1]
  c.g = flat[C >= 3 and 2 or 1]
  c.b = flat[C >= 3 and 3 or 1]
  return c
end

--- viz.draw_text(img (3,H,W) or (1,H,W), text, x, y, {scale=2, color={0,0,0}, vertical=false})
---   -> a new (3,H,W) image with the text drawn, top-left at pixel (x, y) (0-based)
function M.draw_text(img, text, x, y, opts)
  opts = opts or {}
  if not glimpse.is_tensor(img) or img:dim() ~= 3 then
    error("viz.draw_text: img must be a (C,H,W) tensor", 2)
  end
  local c = from_tensor(img)
  c:text(tostring(text), x or 0, y or 0, opts.scale or 2, opts.color or {0, 0, 0}, opts.vertical)
  return c:tensor()
end

-- ---------------------------------------------------------------------------------------
-- alignment maps

local function tokens_of(t, what)
  if type(t) == "string" then
    local out = {}
    for k = 1, #t do out[k] = t:sub(k, k) end
    return out
  end
  if type(t) ~= "table" then error("viz.alignment: " .. what .. " must be a list of strings or a string", 3) end
  local out = {}
  for k, v in ipairs(t) do out[k] = tostring(v) end
  return out
end

local function matrix_of(alpha)
  if glimpse.is_tensor(alpha) then
    if alpha:dim() ~= 2 then error("viz.alignment: alpha must be (T_tgt, T_src)", 3) end
    return alpha:detach():totable()
  end
  if type(alpha) ~= "table" or type(alpha[1]) ~= "table" then
    error("viz.alignment: alpha must be a (T_tgt, T_src) tensor or a table of rows", 3)
  end
  return alpha
end

-- Common checks and layout numbers.
local function prepare(alpha, src, tgt, opts)
  local a = matrix_of(alpha)
  src, tgt = tokens_of(src, "src_tokens"), tokens_of(tgt, "tgt_tokens")
  local T, S = #a, #a[1]
  if #src ~= S then
    error(string.format("viz.alignment: %d source tokens for %d columns of alpha", #src, S), 3)
  end
  if #tgt ~= T then
    error(string.format("viz.alignment: %d target tokens for %d rows of alpha", #tgt, T), 3)
  end
  local o = {cell = opts.cell or 22, scale = opts.scale or 2, cmap = opts.cmap or "viridis",
             vmin = opts.vmin or 0, vmax = opts.vmax or 1, title = opts.title,
             min_width = opts.min_width or M.MIN_WIDTH}
  if o.vmax <= o.vmin then o.vmax = o.vmin + 1 end
  return a, src, tgt, T, S, o
end

M.MIN_WIDTH = 320        -- px: the narrowest heatmap picture
M.MAX_CELL = 40          -- px: cells grow up to this to reach MIN_WIDTH

--- viz.label_step(cell, size) -> k: label every k-th row or column of `cell` px when a
--- label takes `size` px across them (2 px apart at least)
function M.label_step(cell, size)
  return math.max(1, math.ceil((size + 2) / math.max(cell, 1)))
end

local function shown(k, i) return (i - 1) % k == 0 end

-- the cell size that makes a picture of fixed width `rest` plus S cells reach min_width
local function grown_cell(cell, S, rest, min_width)
  if rest + S * cell >= min_width then return cell end
  return math.max(cell, math.min(M.MAX_CELL, math.ceil((min_width - rest) / math.max(S, 1))))
end

local function colour(o, x)
  local v = (x - o.vmin) / (o.vmax - o.vmin)
  v = v < 0 and 0 or (v > 1 and 1 or v)
  local r, g, b = glimpse.image.colormap(o.cmap, v)
  return {r, g, b}
end

--- viz.alignment_image(alpha (T_tgt,T_src), src_tokens, tgt_tokens, opts) -> (3,H,W) image
-- opts: cell (pixels per cell, 22; grown to reach min_width), scale (font scale, 2), cmap
-- ("viridis"; jet, hot, grey), vmin/vmax (colour range, 0..1), title (a line above the
-- map), min_width (viz.MIN_WIDTH, 320 px).
function M.alignment_image(alpha, src, tgt, opts)
  opts = opts or {}
  local a, S_tok, T_tok, T, S, o = prepare(alpha, src, tgt, opts)
  local cell, sc = o.cell, o.scale
  local th, pad = M.text_height(sc), 6
  local maxs, maxt = 0, 0
  for _, s in ipairs(S_tok) do maxs = math.max(maxs, M.text_width(s, sc)) end
  for _, s in ipairs(T_tok) do maxt = math.max(maxt, M.text_width(s, sc)) end
  local title_h = o.title and th + 2 * pad or 0
  local left = pad + maxt + pad
  local bar_w = 14
  local legend_w = 2 * pad + bar_w + pad + M.text_width(string.format("%.2g", o.vmax), sc) + pad
  cell = grown_cell(cell, S, left + legend_w, o.min_width)
  local all_short = maxs <= cell - 2       -- every source label fits its column: horizontal
  local kc = M.label_step(cell, all_short and maxs or th)
  local kr = M.label_step(cell, th)
  local top = title_h + pad + (all_short and th or maxs) + pad
  local bar_left = left + S * cell + 2 * pad
  local W = bar_left + bar_w + pad + M.text_width(string.format("%.2g", o.vmax), sc) + pad
  if o.title then W = math.max(W, pad + M.text_width(o.title, sc) + pad) end
  W = math.max(W, o.min_width)
  local H = top + T * cell + pad
  H = math.max(H, top + 2 * th + pad)
  local cv = canvas(W, H, {1, 1, 1})
  local black = {0, 0, 0}
  if o.title then cv:text(o.title, pad, pad, sc, black) end
  -- cells
  for i = 1, T do
    for j = 1, S do
      cv:rect(left + (j - 1) * cell, top + (i - 1) * cell, cell, cell, colour(o, a[i][j]))
    end
  end
  -- source labels along the top, centred on their columns
  for j, s in ipairs(S_tok) do
    local cx = left + (j - 1) * cell + cell // 2
    if not shown(kc, j) then  -- crowded: every kc-th label
    elseif all_short then
      cv:text(s, cx - M.text_width(s, sc) // 2, top - pad - th, sc, black)
    else
      local w = M.text_width(s, sc)
      cv:text(s, cx - th // 2, top - pad - w, sc, black, true)
    end
  end
  -- target labels on the left, right-aligned, centred on their rows
  for i, s in ipairs(T_tok) do
    local cy = top + (i - 1) * cell + cell // 2
    if shown(kr, i) then cv:text(s, left - pad - M.text_width(s, sc), cy - th // 2, sc, black) end
  end
  -- colour bar: vmax at the top, vmin at the bottom
  local bar_h = T * cell
  for y = 0, bar_h - 1 do
    local x = o.vmax - (o.vmax - o.vmin) * y / math.max(1, bar_h - 1)
    cv:rect(bar_left, top + y, bar_w, 1, colour(o, x))
  end
  local lx = bar_left + bar_w + 4
  cv:text(string.format("%.2g", o.vmax), lx, top, sc, black)
  cv:text(string.format("%.2g", o.vmin), lx, top + bar_h - th, sc, black)
  return cv:tensor()
end

local function xml_escape(s)
  return (s:gsub("[&<>\"']", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
                              ['"'] = "&quot;", ["'"] = "&apos;"}))
end

--- viz.alignment_svg(alpha, src_tokens, tgt_tokens, path or nil, opts) -> the SVG text
-- The same map as an SVG document (one rect per cell, text labels, a title per cell with
-- its value); written to path when given.
function M.alignment_svg(alpha, src, tgt, path, opts)
  opts = opts or {}
  local a, S_tok, T_tok, T, S, o = prepare(alpha, src, tgt, opts)
  local cell, font = o.cell, 7 * o.scale
  local maxs, maxt = 0, 0
  for _, s in ipairs(S_tok) do maxs = math.max(maxs, #s) end
  for _, s in ipairs(T_tok) do maxt = math.max(maxt, #s) end
  local title_h = o.title and font + 12 or 0
  local left = math.ceil(12 + maxt * font * 0.62)
  cell = grown_cell(cell, S, left + 12 + 14 + 8 + 5 * font, o.min_width)
  local kc, kr = M.label_step(cell, font), M.label_step(cell, font)
  local top = math.ceil(title_h + 12 + maxs * font * 0.62)
  local bar_left = left + S * cell + 12
  local W, H = bar_left + 14 + 8 + 5 * font, top + T * cell + 12
  if o.title then W = math.max(W, math.ceil(24 + #o.title * font * 0.62)) end
  W = math.max(W, o.min_width)
  local out = {}
  local function add(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
      .. 'font-family="DejaVu Sans Mono, monospace" font-size="%d">', W, H, W, H, font)
  add('<rect width="100%%" height="100%%" fill="white"/>')
  if o.title then add('<text x="12" y="%d">%s</text>', font + 4, xml_escape(o.title)) end
  for i = 1, T do
    for j = 1, S do
      local c = colour(o, a[i][j])
      add('<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="#%02x%02x%02x">'
          .. '<title>%s -> %s: %.4f</title></rect>', left + (j - 1) * cell,
          top + (i - 1) * cell, cell, cell, math.floor(c[1] * 255 + 0.5),
          math.floor(c[2] * 255 + 0.5), math.floor(c[3] * 255 + 0.5),
          xml_escape(T_tok[i]), xml_escape(S_tok[j]), a[i][j])
    end
  end
  for j, s in ipairs(S_tok) do
    local x, y = left + (j - 0.5) * cell, top - 6
    if shown(kc, j) then add('<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" dominant-baseline="middle">'
        .. '%s</text>', x, y, x, y, xml_escape(s)) end
  end
  for i, s in ipairs(T_tok) do
    if shown(kr, i) then
      add('<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>',
          left - 6, top + (i - 0.5) * cell, xml_escape(s))
    end
  end
  -- colour bar: vmax at the top
  local stops = {}
  for k = 0, 10 do
    local c = colour(o, o.vmax - (o.vmax - o.vmin) * k / 10)
    stops[#stops + 1] = string.format('<stop offset="%d%%" stop-color="#%02x%02x%02x"/>', k * 10,
                                      math.floor(c[1] * 255 + 0.5), math.floor(c[2] * 255 + 0.5),
                                      math.floor(c[3] * 255 + 0.5))
  end
  add('<defs><linearGradient id="bar" x1="0" y1="0" x2="0" y2="1">%s</linearGradient></defs>',
      table.concat(stops))
  add('<rect x="%d" y="%d" width="14" height="%d" fill="url(#bar)"/>', bar_left, top, T * cell)
  add('<text x="%d" y="%d" dominant-baseline="hanging">%.2g</text>', bar_left + 18, top, o.vmax)
  add('<text x="%d" y="%d">%.2g</text>', bar_left + 18, top + T * cell, o.vmin)
  add('</svg>')
  local svg = table.concat(out, "\n") .. "\n"
  if path then
    local f, err = io.open(path, "w")
    if not f then error("viz.alignment_svg: " .. tostring(err), 2) end
    f:write(svg)
    f:close()
  end
  return svg
end

--- viz.alignment(alpha (T_tgt,T_src), src_tokens, tgt_tokens, path, opts) -> path
-- Writes the heatmap as PNG (or JPEG/BMP/TGA by extension) through glimpse.image.save, or as
-- SVG when path ends in .svg.  Tokens: a list of strings, or a string of one-character tokens.
function M.alignment(alpha, src, tgt, path, opts)
  if type(path) ~= "string" then error("viz.alignment: path must be a string", 2) end
  if path:lower():match("%.svg$") then
    M.alignment_svg(alpha, src, tgt, path, opts)
  else
    glimpse.image.save(path, M.alignment_image(alpha, src, tgt, opts))
  end
  return path
end

return M
