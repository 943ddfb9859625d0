--- glimpse.draw -- a small raster canvas for plots that glimpse.image and glimpse.viz do not
-- make: anti-aliased lines of any width, filled discs, rectangles and text, then a (3,H,W)
-- image tensor or a PNG.  Pointer-network tours and hulls, and any other picture of points
-- and edges, are drawn with it.
--
--   local draw = require "glimpse.plot.draw"
--   local c = draw.Canvas(200, 100)                      -- white, (W, H) pixels
--   c:line(10, 10, 190, 90, {color = {1, 0, 0}, width = 2})
--   c:disc(100, 50, 4, {color = {0, 0, 1}})
--   c:text("tour", 4, 4, {scale = 2})
--   c:save("/tmp/plot.png")                              -- or c:tensor() -> (3,H,W) in [0,1]
-- Coordinates: pixels, (0, 0) the top-left corner, y down (see the drawing section below).
local glimpse = require "glimpse"

local M = {}

local Canvas = {}
Canvas.__index = Canvas

local function check_colour(rgb, fname)
  if type(rgb) ~= "table" or type(rgb[1]) ~= "number" or type(rgb[2]) ~= "number"
     or type(rgb[3]) ~= "number" then
    error(fname .. ": color must be a table {r, g, b} of numbers in [0,1]", 3)
  end
  return rgb
end

local function check_num(v, what, fname)
  if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge then
    error(string.format("%s: %s must be a finite number, got %s", fname, what, tostring(v)), 3)
  end
  return v
end

--- draw.Canvas(w, h, background={1,1,1}) -> canvas of w x h pixels filled with background
function M.Canvas(w, h, background)
  if math.type(w) ~= "integer" or math.type(h) ~= "integer" or w < 1 or h < 1 then
    error(string.format("draw.Canvas: width and height must be positive integers, got %s x %s",
                        tostring(w), tostring(h)), 2)
  end
  if w * h > 64 * 1024 * 1024 then
    error(string.format("draw.Canvas: %d x %d pixels is too large", w, h), 2)
  end
  local bg = check_colour(background or {1, 1, 1}, "draw.Canvas")
  local c = setmetatable({w = w, h = h, r = {}, g = {}, b = {}, texts = {}}, Canvas)
  local R, G, B = c.r, c.g, c.b
  for i = 1, w * h do R[i], G[i], B[i] = bg[1], bg[2], bg[3] end
  return c
end

-- blend colour rgb into pixel (x, y) (0-based, inside) with weight a in [0,1]
function Canvas:blend(x, y, rgb, a)
  if x < 0 or y < 0 or x >= self.w or y >= self.h or a <= 0 then return end
  if a > 1 then a = 1 end
  local i = y * self.w + x + 1
  local R, G, B = self.r, self.g, self.b
  R[i] = R[i] + (rgb[1] - R[i]) * a
  G[i] = G[i] + (rgb[2] - G[i]) * a
  B[i] = B[i] + (rgb[3] - B[i]) * a
end

--- c:get(x, y) -> r, g, b of pixel (x, y) (0-based column and row)
function Canvas:get(x, y)
  if x < 0 or y < 0 or x >= self.w or y >= self.h then
    error(string.format("canvas:get: pixel (%s, %s) is outside %d x %d", tostring(x),
                        tostring(y), self.w, self.h), 2)
  end
  local i = y * self.w + x + 1
  return self.r[i], self.g[i], self.b[i]
end

-- ---------------------------------------------------------------------------------------
-- drawing
-- Coordinates are pixels with (0, 0) the top-left corner of the top-left pixel, x to the
-- right and y down; pixel (i, j) (0-based column i, row j) covers [i, i+1) x [j, j+1) and
-- its centre is (i + 0.5, j + 0.5).  Shapes are drawn by coverage: a pixel whose centre lies
-- within the shape's half-width plus half a pixel is blended with the colour, in proportion
-- to how far inside it is, which gives smooth edges without supersampling.

-- distance from (px, py) to the segment (x0, y0)-(x1, y1)
local function seg_dist(px, py, x0, y0, x1, y1)
  local dx, dy = x1 - x0, y1 - y0
  local len2 = dx * dx + dy * dy
  local t = 0
  if len2 > 0 then
    t = ((px - x0) * dx + (py - y0) * dy) / len2
    if t < 0 then t = 0 elseif t > 1 then t = 1 end
  end
  local ex, ey = x0 + t * dx - px, y0 + t * dy - py
  return math.sqrt(ex * ex + ey * ey)
end

--- c:line(x0, y0, x1, y1, {color={0,0,0}, width=1, alpha=1}) -> c
-- An anti-aliased segment with round ends.  Only the pixels within width/2 + 1 of the
-- segment are visited: a band along the longer axis.
function Canvas:line(x0, y0, x1, y1, opts)
  local fname = "canvas:line"
  opts = opts or {}
  check_num(x0, "x0", fname); check_num(y0, "y0", fname)
  check_num(x1, "x1", fname); check_num(y1, "y1", fname)
  local rgb = check_colour(opts.color or {0, 0, 0}, fname)
  local width = check_num(opts.width or 1, "width", fname)
  local alpha = opts.alpha or 1
  local r = width / 2
  local reach = r + 1
  local steep = math.abs(y1 - y0) > math.abs(x1 - x0)
  -- walk the major axis pixel by pixel; on the minor axis cover the band around the line
  local a0, a1, b0, b1 = x0, x1, y0, y1
  if steep then a0, a1, b0, b1 = y0, y1, x0, x1 end
  if a0 > a1 then a0, a1, b0, b1 = a1, a0, b1, b0 end
  local slope = a1 ~= a0 and (b1 - b0) / (a1 - a0) or 0
  local amax = steep and self.h - 1 or self.w - 1
  local bmax = steep and self.w - 1 or self.h - 1
  local lo = math.max(0, math.floor(a0 - reach))
  local hi = math.min(amax, math.floor(a1 + reach))
  for ai = lo, hi do
    local ac = ai + 0.5
    local t = ac < a0 and a0 or (ac > a1 and a1 or ac)
    local bc = b0 + (t - a0) * slope
    local span = reach * math.sqrt(1 + slope * slope)
    local blo = math.max(0, math.floor(bc - span))
    local bhi = math.min(bmax, math.floor(bc + span))
    for bi = blo, bhi do
      local px, py = ac, bi + 0.5
      if steep then px, py = py, px end
      local d = seg_dist(px, py, x0, y0, x1, y1)
      local cover = r + 0.5 - d
      if cover > 0 then
        local x, y = math.floor(px), math.floor(py)
        self:blend(x, y, rgb, math.min(cover, 1) * alpha)
      end
    end
  end
  return self
end

--- c:polyline(xy {{x,y},...}, {closed=false, color, width, alpha}) -> c
function Canvas:polyline(xy, opts)
  opts = opts or {}
  if type(xy) ~= "table" then error("canvas:polyline: points must be a list of {x, y}", 2) end
  local n = #xy
  for k = 1, n - 1 do
    self:line(xy[k][1], xy[k][2], xy[k + 1][1], xy[k + 1][2], opts)
  end
  if opts.closed and n > 2 then self:line(xy[n][1], xy[n][2], xy[1][1], xy[1][2], opts) end
  return self
end

--- c:disc(cx, cy, radius, {color={0,0,0}, alpha=1}) -> c, an anti-aliased filled circle
function Canvas:disc(cx, cy, radius, opts)
  local fname = "canvas:disc"
  opts = opts or {}
  check_num(cx, "cx", fname); check_num(cy, "cy", fname); check_num(radius, "radius", fname)
  local rgb = check_colour(opts.color or {0, 0, 0}, fname)
  local alpha = opts.alpha or 1
  local x0 = math.max(0, math.floor(cx - radius - 1))
  local x1 = math.min(self.w - 1, math.floor(cx + radius + 1))
  local y0 = math.max(0, math.floor(cy - radius - 1))
  local y1 = math.min(self.h - 1, math.floor(cy + radius + 1))
  for y = y0, y1 do
    for x = x0, x1 do
      local dx, dy = x + 0.5 - cx, y + 0.5 - cy
      local cover = radius + 0.5 - math.sqrt(dx * dx + dy * dy)
      if cover > 0 then self:blend(x, y, rgb, math.min(cover, 1) * alpha) end
    end
  end
  return self
end

--- c:rect(x, y, w, h, {color={0,0,0}, fill=true, width=1}) -> c; pixel-aligned (0-based
--- top-left x, y), filled or an outline of the given width
function Canvas:rect(x, y, w, h, opts)
  local fname = "canvas:rect"
  opts = opts or {}
  check_num(x, "x", fname); check_num(y, "y", fname)
  check_num(w, "w", fname); check_num(h, "h", fname)
  local rgb = check_colour(opts.color or {0, 0, 0}, fname)
  if opts.fill == false then
    local lw = math.floor(opts.width or 1)
    self:rect(x, y, w, lw, {color = rgb})
    self:rect(x, y + h - lw, w, lw, {color = rgb})
    self:rect(x, y, lw, h, {color = rgb})
    self:rect(x + w - lw, y, lw, h, {color = rgb})
    return self
  end
  x, y = math.floor(x), math.floor(y)
  for yy = math.max(0, y), math.min(self.h, y + math.floor(h)) - 1 do
    for xx = math.max(0, x), math.min(self.w, x + math.floor(w)) - 1 do
      self:blend(xx, yy, rgb, 1)
    end
  end
  return self
end

--- c:text(s, x, y, {scale=2, color={0,0,0}}) -> c; text with its top-left at pixel (x, y),
--- in glimpse.viz's bitmap font (drawn when the canvas becomes a tensor)
function Canvas:text(s, x, y, opts)
  opts = opts or {}
  check_num(x, "x", "canvas:text"); check_num(y, "y", "canvas:text")
  self.texts[#self.texts + 1] = {tostring(s), math.floor(x), math.floor(y),
                                 {scale = opts.scale or 2, color = opts.color or {0, 0, 0}}}
  return self
end

--- c:tensor() -> (3,H,W) image in [0,1]
function Canvas:tensor()
  local img = glimpse.tensor({self.r, self.g, self.b}):reshape(3, self.h, self.w)
  if #self.texts > 0 then
    local viz = glimpse.viz
    for _, t in ipairs(self.texts) do img = viz.draw_text(img, t[1], t[2], t[3], t[4]) end
  end
  return img
end

--- c:save(path) -> path (PNG, JPEG, BMP or TGA by extension, through glimpse.image.save)
function Canvas:save(path)
  if type(path) ~= "string" then error("canvas:save: path must be a string", 2) end
  glimpse.image.save(path, self:tensor())
  return path
end

return M
