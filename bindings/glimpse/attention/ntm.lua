--- glimpse.attention.ntm -- Neural Turing Machine addressing (Graves et al. 2014, sec. 3),
-- published as glimpse.attention.ntm: content, interpolation, circular shift, sharpening,
-- and the memory's read and write.
--
--   local w = attention.ntm.address({key = k, beta = b, g = g, s = s, gamma = y}, mem, w_prev)
--   local r = attention.ntm.read(w, mem)
local glimpse = require "glimpse"
local args = require "glimpse.attention.args"
local fused = require "glimpse.attention.fused"

local C = glimpse._attention
local check_tensor = args.check_tensor

local ntm = {}

--- ntm.content(key (B,D), memory (B,N,D), beta (B) tensor or number) -> w^c (B,N)
-- w^c_i = softmax_i(beta K[key, M_i]), K the cosine similarity (eq. 5-6).
function ntm.content(key, memory, beta)
  return glimpse.softmax(fused.cosine_scores(key, memory, beta), 2)
end

--- ntm.interpolate(wc (B,N), w_prev (B,N), g (B) or (B,1) in [0,1]) -> g wc + (1 - g) w_prev
function ntm.interpolate(wc, w_prev, g)
  local fname = "attention.ntm.interpolate"
  check_tensor(wc, "wc (B,N)", 2, 2, fname)
  check_tensor(w_prev, "w_prev (B,N)", 2, 2, fname)
  if type(g) ~= "number" then check_tensor(g, "g (B) or a number", nil, 2, fname) end
  if type(g) ~= "number" then g = g:reshape(wc.shape[1], 1) end
  return wc * g + w_prev * (1 - g)
end

--- ntm.shift(w (B,N), s (B,2K+1)) -> w~ (B,N), w~_i = sum_j w_j s(i - j mod N) (eq. 8)
-- s's entries are the weights of shifts -K..K; a one-hot s at +1 moves w up one slot.
function ntm.shift(w, s) return C.circular_shift(w, s) end

--- ntm.sharpen(w (B,N), gamma (B) tensor or number >= 1) -> w^gamma / sum w^gamma (eq. 9)
ntm.sharpen = fused.sharpen

--- ntm.address(p, memory, w_prev) -> w (B,N): content, interpolation, shift, sharpening
-- p = {key (B,D), beta (B), g (B), s (B,S), gamma (B)}, usually produced by the controller.
function ntm.address(p, memory, w_prev)
  if type(p) ~= "table" then
    error("attention.ntm.address: p must be a table {key, beta, g, s, gamma}, got " .. type(p), 2)
  end
  local w = ntm.content(p.key, memory, p.beta)
  if w_prev then w = ntm.interpolate(w, w_prev, p.g) end
  if p.s then w = ntm.shift(w, p.s) end
  if p.gamma then w = ntm.sharpen(w, p.gamma) end
  return w
end

--- ntm.read(w (B,N), memory (B,N,D)) -> r (B,D) = sum_i w_i M_i (eq. 2)
ntm.read = fused.context

--- ntm.write(memory (B,N,D), w (B,N), erase (B,D) in [0,1], add (B,D)) -> memory' (B,N,D)
-- M~_i = M_i * (1 - w_i e) (eq. 3), M'_i = M~_i + w_i a (eq. 4).
function ntm.write(memory, w, erase, add)
  local fname = "attention.ntm.write"
  check_tensor(memory, "memory (B,N,D)", 3, 2, fname)
  check_tensor(w, "w (B,N)", 2, 2, fname)
  if erase ~= nil then check_tensor(erase, "erase (B,D)", 2, 2, fname) end
  if add ~= nil then check_tensor(add, "add (B,D)", 2, 2, fname) end
  local B, N, D = memory.shape[1], memory.shape[2], memory.shape[3]
  local wc = w:reshape(B, N, 1)
  local m = memory
  if erase then m = m * (1 - wc * erase:reshape(B, 1, D)) end
  if add then m = m + wc * add:reshape(B, 1, D) end
  return m
end

return ntm
