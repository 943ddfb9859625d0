--- bench/conv_layers.lua -- ResNet-18's convolutions one by one (batch 8, 224 x 224 input,
-- inference: no tape, so small batches keep their Winograd weights), each through the
-- convolution paths a 3x3 stride-1 layer can take: Winograd's tile by size (0), F(2x2,3x3)
-- (2), F(4x4,3x3) (4) and im2col (-1, Winograd off).  Strided and 1x1 layers always go
-- through im2col, so their columns differ by noise only.  Prints the median of --rounds
-- calls per layer and path, and the network's total (each layer times its count).  Not a
-- timed test.
--
-- Usage: glimpse bench/conv_layers.lua [--threads 2] [--rounds 9] [--tiles 0,2,4,-1]
local glimpse = require "glimpse"

local opts = {threads = glimpse.get_num_threads(), rounds = 9, tiles = "0,2,4,-1"}
local i = 1
while arg[i] do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil or not arg[i + 1] then
    error("conv_layers: usage: glimpse bench/conv_layers.lua [--threads N] [--rounds N] " ..
          "[--tiles 0,2,4,-1], got '" .. tostring(arg[i]) .. "'", 0)
  end
  opts[k] = type(opts[k]) == "number" and math.tointeger(tonumber(arg[i + 1])) or arg[i + 1]
  if opts[k] == nil then error("conv_layers: --" .. k .. " needs an integer", 0) end
  i = i + 2
end
glimpse.set_num_threads(opts.threads)

-- C, O, input size, kernel, stride, padding, how many the network has
local LAYERS = {
  {3, 64, 224, 7, 2, 3, 1}, {64, 64, 56, 3, 1, 1, 4}, {64, 128, 56, 3, 2, 1, 1},
  {128, 128, 28, 3, 1, 1, 3}, {64, 128, 56, 1, 2, 0, 1}, {128, 256, 28, 3, 2, 1, 1},
  {256, 256, 14, 3, 1, 1, 3}, {128, 256, 28, 1, 2, 0, 1}, {256, 512, 14, 3, 2, 1, 1},
  {512, 512, 7, 3, 1, 1, 3}, {256, 512, 14, 1, 2, 0, 1}}

local tiles = {}
for m in opts.tiles:gmatch("[^,]+") do tiles[#tiles + 1] = math.tointeger(tonumber(m)) end
local total = {}
print(string.format("ResNet-18's convolutions, batch 8, %d thread(s), median of %d (ms):",
                    opts.threads, opts.rounds))
glimpse.no_grad(function()
  for _, l in ipairs(LAYERS) do
    local C, O, H, k, st, p, n = table.unpack(l)
    local x, w = glimpse.randn(8, C, H, H), glimpse.randn(O, C, k, k) * 0.05
    local line = string.format("%4d -> %-4d %3d x %-3d k%d s%d (x%d):", C, O, H, H, k, st, n)
    for ti, m in ipairs(tiles) do
      local prev = glimpse._winograd_tile(m)
      local ts = {}
      for r = 1, opts.rounds do
        local t0 = glimpse.clock()
        glimpse.conv2d(x, w, nil, {stride = st, padding = p}):close()
        ts[r] = glimpse.clock() - t0
      end
      glimpse._winograd_tile(prev)
      table.sort(ts)
      local med = ts[(#ts + 1) // 2]
      total[ti] = (total[ti] or 0) + med * n
      line = line .. string.format("  [%d] %7.2f", m, med * 1e3)
    end
    print(line)
  end
end)
local line = "the network's convolutions:  "
for ti, m in ipairs(tiles) do line = line .. string.format("  [%d] %7.1f", m, total[ti] * 1e3) end
print(line)
