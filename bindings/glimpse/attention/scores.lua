--- glimpse.attention.scores -- the score registry: every score function by name, with its
-- parameters as plain tensors in a table p, its once-per-sequence precompute and its
-- per-step fused step; and the convolutional score's pieces (Allamanis et al. 2016).
--
--   local cache = attention.precompute("additive", p, keys)          -- once per sequence
--   local ctx, alpha = attention.step("additive", p, cache, q, values, mask, opts)
--
--   dot, scaled_dot  (none; Dq == Dk)
--   general          W (Dq,Dk)                      e = q^T W k
--   additive         W (H,Dq), b (H) or nil, U (H,Dk), v (H)   e = v^T tanh(W q + b + U k)
--   concat           W (H,Dq+Dk), v (H)             e = v^T tanh(W [q; k])
--   location         W (Lmax,Dq), b (Lmax)          e = W q + b (no keys; Luong's location)
--   cosine           W (Dk,Dq) or nil, and beta (a number) or Wb (1,Dq), bb (1):
--                    e = beta cos(W q, k), beta = softplus(Wb q + bb) >= 0
--   conv             F1 (H,R*Dk), b1 (H), Wq (H,Dq), F2 (1,R*H)
--
-- A score of one's own joins the registry through attention.register_score(name, spec)
-- (parameters declared by shape, the score written with glimpse ops); from then on the name
-- is in SCORES and works wherever a built-in score does (nn.Attention, the models, decoding,
-- checkpoints, compare).  attention.gradcheck_score(name, sizes) checks its gradients.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local args = require "glimpse.attention.args"

local C = glimpse._attention
local named, as_tensor, check_tensor = args.named, args.as_tensor, args.check_tensor

local M = {}

--- The score function names, in the order the library documents them, then the names
--- registered with attention.register_score in the order they were registered.
M.SCORES = {"dot", "scaled_dot", "general", "additive", "concat", "location", "cosine", "conv"}

--- The built-in score names (SCORES before any registration); register_score refuses them.
M.BUILTIN_SCORES = table.move(M.SCORES, 1, #M.SCORES, 1, {})

-- ---------------------------------------------------------------------------------------
-- convolutional attention (Allamanis et al. 2016), composed from core ops

--- attention.unfold(x (B,L,D), R odd) -> (B,L,R*D): row l holds x_(l-h) .. x_(l+h),
--- h = (R-1)/2, zeros outside 1..L (the input of a 1-D convolution of width R as one matmul)
function M.unfold(x, R)
  check_tensor(x, "input", 3, 2)
  if math.type(R) ~= "integer" or R < 1 or R % 2 == 0 then
    error("attention.unfold: width must be a positive odd integer, got " .. tostring(R), 2)
  end
  local B, L, D = x.shape[1], x.shape[2], x.shape[3]
  local h = (R - 1) // 2
  if h == 0 then return x end
  local z = glimpse.zeros(B, h, D)
  local padded = glimpse.cat({z, x, z}, 2)
  local cols = {}
  for r = 1, R do cols[r] = padded:narrow(2, r, L) end
  return glimpse.cat(cols, 3)
end

--- attention.conv_features(keys (B,L,Dk), F1 (H,R*Dk), b1 (H)) -> f (B,L,H) =
--- relu(conv(keys) + b1): K_l1 = H filters of width R over the key sequence
function M.conv_features(keys, F1, b1)
  check_tensor(keys, "keys", 3, 2, "attention.conv_features")
  check_tensor(F1, "F1", 2, 2, "attention.conv_features")
  local R = F1.shape[2] // keys.shape[3]
  if R * keys.shape[3] ~= F1.shape[2] then
    check.fail(2, "attention.conv_features: F1 %s does not fit keys of width %d",
               check.shape(F1), keys.shape[3])
  end
  return glimpse.linear(M.unfold(keys, R), F1, b1):relu()
end

--- attention.conv_scores(f (B,L,H), q (B,Dq), Wq (H,Dq), F2 (1,R*H)) -> e (B,L):
--- the features gated by the query (f * Wq q) and convolved down to one score per position
function M.conv_scores(f, q, Wq, F2)
  local fname = "attention.conv_scores"
  check_tensor(f, "features", 3, 2, fname)
  check_tensor(q, "query", 2, 2, fname)
  check_tensor(Wq, "Wq", 2, 2, fname)
  check_tensor(F2, "F2", 2, 2, fname)
  local B, L, H = f.shape[1], f.shape[2], f.shape[3]
  local R = F2.shape[2] // H
  if q.shape[1] ~= B or Wq.shape[1] ~= H or R * H ~= F2.shape[2] or R % 2 == 0 then
    check.fail(2, "%s: features %s, query %s, Wq %s and F2 %s do not fit (f (B,L,H), " ..
               "q (B,Dq), Wq (H,Dq), F2 (1,R*H) with R odd)", fname, check.shape(f),
               check.shape(q), check.shape(Wq), check.shape(F2))
  end
  local g = f * named(fname, glimpse.linear, q, Wq):reshape(B, 1, H)
  return named(fname, glimpse.linear, M.unfold(g, R), F2):reshape(B, L)
end

-- ---------------------------------------------------------------------------------------
-- the registry: precompute(p, keys) runs once per sequence (it projects the keys),
-- step(p, cache, q, values, mask, o) once per decoder step

local SCORE = {}

local function key_dim(keys) return keys.shape[3] end

SCORE.dot = {
  precompute = function(_, keys) return {k = keys} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, 1, o)
  end,
}

SCORE.scaled_dot = {
  precompute = function(_, keys) return {k = keys, scale = 1 / math.sqrt(key_dim(keys))} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, cache.scale, o)
  end,
}

SCORE.general = {
  -- q^T W k = q . (W k): the keys are projected once, then it is a dot score
  precompute = function(p, keys) return {k = glimpse.linear(keys, p.W)} end,
  step = function(_, cache, q, values, mask, o)
    return C.dot(q, cache.k, values, mask, o.prior, 1, o)
  end,
}

SCORE.additive = {
  precompute = function(p, keys) return {uk = glimpse.linear(keys, p.U)} end,
  step = function(p, cache, q, values, mask, o)
    local uk = cache.uk
    if o.extra then uk = uk + o.extra end
    return C.additive(glimpse.linear(q, p.W, p.b), uk, p.v, values, mask, o.prior, o)
  end,
}

-- W_q, the query half of the concat score's W (H, Dq+Dk), checked against the query's width
local function concat_query_weight(p, cache, q)
  local dq = p.W.shape[2] - cache.key_width
  if q.shape[2] ~= dq then
    check.fail(4, "attention: concat W %s with keys of width %d needs queries of width %d, " ..
               "got %d", check.shape(p.W), cache.key_width, dq, q.shape[2])
  end
  return p.W:narrow(2, 1, dq)
end

SCORE.concat = {
  -- W [q; k] = W_q q + W_k k with W = [W_q W_k]: the key half is applied once per sequence;
  -- the query half is cut from W at each step (the cache holds per-sequence values only, so
  -- a decoder can reorder every tensor in it by row)
  precompute = function(p, keys)
    local dk = key_dim(keys)
    local dq = p.W.shape[2] - dk
    if dq < 1 then
      check.fail(3, "attention: concat W %s is too narrow for keys of width %d",
                 check.shape(p.W), dk)
    end
    return {uk = glimpse.linear(keys, p.W:narrow(2, dq + 1, dk)), key_width = dk}
  end,
  step = function(p, cache, q, values, mask, o)
    local uk = cache.uk
    if o.extra then uk = uk + o.extra end
    return C.additive(glimpse.linear(q, concat_query_weight(p, cache, q)), uk, p.v, values,
                      mask, o.prior, o)
  end,
}

SCORE.location = {
  precompute = function(p, keys)
    local L, Lmax = keys.shape[2], p.W.shape[1]
    if L > Lmax then
      check.fail(3, "attention: location score was built for at most %d positions, got %d " ..
                 "(raise max_len)", Lmax, L)
    end
    return {L = L}
  end,
  step = function(p, cache, q, values, mask, o)
    local e = glimpse.linear(q, p.W, p.b)
    if cache.L < p.W.shape[1] then e = e:narrow(2, 1, cache.L) end
    return C.context(e, values, mask, o.prior, o)
  end,
}

SCORE.cosine = {
  precompute = function(_, keys) return {k = keys} end,
  step = function(p, cache, q, values, mask, o)
    local qp = p.W and glimpse.linear(q, p.W) or q
    local beta = p.beta
    if type(beta) == "number" then
      beta = glimpse.full({q.shape[1]}, beta)
    elseif beta == nil and p.Wb then
      beta = glimpse.linear(q, p.Wb, p.bb):softplus():reshape(q.shape[1])
    end
    local e = C.cosine(qp, cache.k, beta)
    return C.context(e, values, mask, o.prior, o)
  end,
}

-- conv: f = relu(conv_F1(keys) + b1) (B,L,H), once per sequence;  e = conv_F2(f * (Wq q))
SCORE.conv = {
  precompute = function(p, keys) return {f = M.conv_features(keys, p.F1, p.b1)} end,
  step = function(p, cache, q, values, mask, o)
    return C.context(M.conv_scores(cache.f, q, p.Wq, p.F2), values, mask, o.prior, o)
  end,
}

-- ---------------------------------------------------------------------------------------
-- scores of one's own: attention.register_score
--
-- A registered score is {params = fn(Dq, Dk, H) -> {name = shape or initial tensor},
-- precompute = fn(keys, p) -> k (once per sequence), score = fn(q, k, p) -> e (B,L)}; its
-- registry entry normalises e with the same fused context op as location/cosine/conv.

local BUILTIN = {}
for _, n in ipairs(M.BUILTIN_SCORES) do BUILTIN[n] = true end

local OWN = {}                     -- name -> the checked spec of a registered score
local SPEC_FIELDS = {"params", "precompute", "score", "help"}
-- the sizes register_score tries a new score on: q (B,Dq), keys (B,L,Dk), hidden H
local TRIAL = {batch = 2, length = 3, query = 4, key = 4, hidden = 4}

local function identifier(s) return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil end

-- spec.params(Dq, Dk, H), checked: a list {name=, shape= | init=} sorted by name
local function param_decls(name, spec, dq, dk, dh, fname, level)
  if not spec.params then return {} end
  local ok, t = pcall(spec.params, dq, dk, dh)
  if not ok then
    check.fail(level + 1, "%s: score '%s': params(%d, %d, %d) failed: %s", fname, name, dq, dk,
               dh, tostring(t))
  end
  if type(t) ~= "table" then
    check.fail(level + 1, "%s: score '%s': params(query, key, hidden) must return a table " ..
               "{name = shape or tensor}, got %s", fname, name, type(t))
  end
  local out = {}
  for k, v in pairs(t) do
    if not identifier(k) then
      check.fail(level + 1, "%s: score '%s': parameter names must be identifiers, got %s", fname,
                 name, check.value(k))
    end
    if glimpse.is_tensor(v) then
      out[#out + 1] = {name = k, init = v}
    else
      local good = type(v) == "table" and #v >= 1 and #v <= 8
      for i = 1, good and #v or 0 do
        good = good and math.type(v[i]) == "integer" and v[i] >= 1
      end
      if not good then
        check.fail(level + 1, "%s: score '%s': parameter '%s' must be a shape (a list of 1 to 8 " ..
                   "positive integers) or a tensor, got %s", fname, name, k, check.value(v))
      end
      out[#out + 1] = {name = k, shape = v}
    end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

local function own_spec(name, fname, level)
  local spec = OWN[name]
  if not spec then
    local reg = {}
    for n in pairs(OWN) do reg[#reg + 1] = n end
    table.sort(reg)
    check.fail(level + 1, "%s: '%s' is not a registered score (%s)", fname, tostring(name),
               #reg > 0 and "registered: " .. table.concat(reg, ", ") or "none is registered")
  end
  return spec
end

--- attention.score_parameters(name, Dq, Dk, H) -> p {param = tensor}, names (sorted): fresh
--- parameters (leaves requiring grad) of the registered score name for queries of width Dq,
--- keys of width Dk and hidden width H
-- A parameter declared by its shape starts uniform in +-1/sqrt(n), n its last size (the
-- fan-in of a (out,in) weight, as nn.Linear), drawn from the global generator in the order
-- of the names; one declared as a tensor starts as a copy of it.
function M.score_parameters(name, dq, dk, dh)
  local fname = "attention.score_parameters"
  local spec = own_spec(name, fname, 2)
  for i, d in ipairs({dq, dk, dh}) do
    check.int(fname, ({"Dq", "Dk", "H"})[i], d, 1, nil, 2)
  end
  local p, names = {}, {}
  for _, d in ipairs(param_decls(name, spec, dq, dk, dh, fname, 2)) do
    local t
    if d.init then
      t = glimpse.no_grad(function() return d.init:detach():clone() end)
    else
      t = glimpse.empty(table.unpack(d.shape))
      local b = 1 / math.sqrt(d.shape[#d.shape])
      t:uniform_(-b, b)
    end
    p[d.name], names[#names + 1] = t:requires_grad(), d.name
  end
  return p, names
end

-- The errors of a registered score at work carry no position: the line inside the library
-- says nothing to the user, the message names the score and the shapes.

-- the rows of what precompute returned: a tensor, or a table of tensors, each with B rows
local function check_cache_rows(name, k, B)
  local ok = glimpse.is_tensor(k) and k:dim() >= 1 and k.shape[1] == B
  if not ok and type(k) == "table" and not glimpse.is_tensor(k) then
    ok = true
    for _, v in pairs(k) do
      ok = ok and glimpse.is_tensor(v) and v:dim() >= 1 and v.shape[1] == B
    end
  end
  if not ok then
    error(string.format("attention: score '%s': precompute must return a tensor (or a table " ..
                        "of tensors) with one row per sequence on dim 1 (%d rows), got %s", name,
                        B, glimpse.is_tensor(k) and check.shape(k) or type(k)), 0)
  end
end

local function own_precompute(name, spec, p, keys)
  if not spec.precompute then return {k = keys, L = keys.shape[2]} end
  local ok, k = pcall(spec.precompute, keys, p)
  if not ok then
    error(string.format("attention: score '%s': precompute failed on keys %s: %s", name,
                        check.shape(keys), tostring(k)), 0)
  end
  check_cache_rows(name, k, keys.shape[1])
  return {k = k, L = keys.shape[2]}
end

-- e (B,L) = spec.score(q, k, p), its shape checked
local function own_scores(name, spec, p, cache, q)
  local ok, e = pcall(spec.score, q, cache.k, p)
  local kshape = glimpse.is_tensor(cache.k) and check.shape(cache.k) or "a table"
  if not ok then
    error(string.format("attention: score '%s' failed on query %s and keys %s: %s", name,
                        check.shape(q), kshape, tostring(e)), 0)
  end
  local B, L = q.shape[1], cache.L
  if not glimpse.is_tensor(e) or e:dim() ~= 2 or e.shape[1] ~= B or e.shape[2] ~= L then
    error(string.format("attention: score '%s' returned %s for query %s and keys %s; it must " ..
                        "return scores (B,L) = [%d,%d]", name,
                        glimpse.is_tensor(e) and check.shape(e) or "a " .. type(e),
                        check.shape(q), kshape, B, L), 0)
  end
  return e
end

local function own_entry(name, spec)
  return {
    own = true,
    precompute = function(p, keys) return own_precompute(name, spec, p, keys) end,
    step = function(p, cache, q, values, mask, o)
      return C.context(own_scores(name, spec, p, cache, q), values, mask, o.prior, o)
    end,
    scores = function(p, cache, q) return own_scores(name, spec, p, cache, q) end,
  }
end

--- attention.register_score(name, spec) -> name: a score function of one's own
-- spec = {
--   score = function(q (B,Dq), k, p) -> e (B,L)   the raw scores, written with glimpse ops
--                                                 (autograd differentiates them);
--   params = function(Dq, Dk, H) -> {name = shape or tensor}   (optional) the parameters,
--                                                 p[name] in score and precompute;
--   precompute = function(keys (B,L,Dk), p) -> k   (optional) once per sequence (e.g. U k);
--                                                 a tensor or table of tensors, B rows; k is
--                                                 the keys themselves without it;
--   help = "one line"                             (optional; attention.score_help(name)) }
-- The name (an identifier, not a built-in score) joins attention.SCORES: nn.Attention{score=
-- name}, Seq2Seq{score=name}, decoding, checkpoints and compare's mechanisms take it.  It is
-- tried on q (2,4), keys (2,3,4), H 4 first (the global generator left as it was); a score
-- that fails or returns anything but (B,L) is refused.  Registering a name again replaces it.
function M.register_score(name, spec)
  local fname = "attention.register_score"
  if not identifier(name) then
    check.fail(2, "%s: name must be an identifier string (letters, digits, _), got %s", fname,
               check.value(name))
  end
  if BUILTIN[name] then
    check.fail(2, "%s: '%s' is a built-in score (built-in: %s); choose another name", fname,
               name, table.concat(M.BUILTIN_SCORES, ", "))
  end
  if type(spec) ~= "table" then
    check.fail(2, "%s: spec must be a table {score=, params=, precompute=, help=}, got %s",
               fname, type(spec))
  end
  for k in pairs(spec) do
    local known = false
    for _, f in ipairs(SPEC_FIELDS) do known = known or f == k end
    if not known then
      check.fail(2, "%s: score '%s': unknown spec field %s%s (fields: %s)", fname, name,
                 check.value(k), type(k) == "string" and check.did_you_mean(k, SPEC_FIELDS) or "",
                 table.concat(SPEC_FIELDS, ", "))
    end
  end
  if type(spec.score) ~= "function" then
    check.fail(2, "%s: score '%s': spec.score must be a function (q, k, p) -> scores (B,L), " ..
               "got %s", fname, name, type(spec.score))
  end
  for _, f in ipairs({"params", "precompute"}) do
    if spec[f] ~= nil and type(spec[f]) ~= "function" then
      check.fail(2, "%s: score '%s': spec.%s must be a function or nil, got %s", fname, name, f,
                 type(spec[f]))
    end
  end
  if spec.help ~= nil and type(spec.help) ~= "string" then
    check.fail(2, "%s: score '%s': spec.help must be a string, got %s", fname, name,
               type(spec.help))
  end
  local s = {score = spec.score, params = spec.params, precompute = spec.precompute,
             help = spec.help}
  -- the trial, on tensors of its own: the global generator is left where it was
  local previous = OWN[name]
  OWN[name] = s
  local r1, r2 = glimpse.rng_state()
  glimpse.manual_seed(1)
  local ok, err = pcall(glimpse.no_grad, function()
    local p = M.score_parameters(name, TRIAL.query, TRIAL.key, TRIAL.hidden)
    local keys = glimpse.randn(TRIAL.batch, TRIAL.length, TRIAL.key)
    own_scores(name, s, p, own_precompute(name, s, p, keys), glimpse.randn(TRIAL.batch, TRIAL.query))
  end)
  glimpse.set_rng_state(r1, r2)
  if not ok then
    OWN[name] = previous
    local why = check.strip(err):gsub("^attention[%w_%.]*: score '[^']*':? ?", "")
    check.fail(2, "%s: score '%s' refused (tried on a query [%d,%d], keys [%d,%d,%d] and " ..
               "hidden %d): %s", fname, name, TRIAL.batch, TRIAL.query, TRIAL.batch,
               TRIAL.length, TRIAL.key, TRIAL.hidden, why)
  end
  SCORE[name] = own_entry(name, s)
  if not previous then M.SCORES[#M.SCORES + 1] = name end
  return name
end

--- attention.has_score(name) -> true when name is a built-in or a registered score
function M.has_score(name)
  return SCORE[name] ~= nil
end

--- attention.is_registered_score(name) -> true when name was added by register_score
function M.is_registered_score(name)
  return OWN[name] ~= nil
end

--- attention.score_help(name) -> the help line a registered score was given, or nil
function M.score_help(name)
  return OWN[name] and OWN[name].help
end

--- attention.gradcheck_score(name, {query=4, key=query, hidden=key, batch=2, length=3,
---   seed=1, eps=, atol=, rtol=}) -> true: a registered score's gradients by finite differences
-- Fresh parameters and random q (B,Dq), keys (B,L,Dk) made from seed (the global generator is
-- left as it was); the gradients of precompute + score with respect to the query, the keys
-- and every parameter are compared with central differences (glimpse.gradcheck's defaults).
-- A mismatch is an error naming the score, the input or parameter and the element.
function M.gradcheck_score(name, opts)
  local fname = "attention.gradcheck_score"
  local spec = own_spec(name, fname, 2)
  if opts ~= nil and type(opts) ~= "table" then
    check.fail(2, "%s: opts must be a table or nil, got %s", fname, type(opts))
  end
  opts = opts or {}
  local dq = check.int(fname, "query", opts.query or 4, 1, nil, 2)
  local dk = check.int(fname, "key", opts.key or dq, 1, nil, 2)
  local dh = check.int(fname, "hidden", opts.hidden or dk, 1, nil, 2)
  local B = check.int(fname, "batch", opts.batch or 2, 1, nil, 2)
  local L = check.int(fname, "length", opts.length or 3, 1, nil, 2)
  local seed = check.int(fname, "seed", opts.seed or 1, 0, nil, 2)
  local r1, r2 = glimpse.rng_state()
  glimpse.manual_seed(seed)
  local ok, p, names = pcall(M.score_parameters, name, dq, dk, dh)
  local q = glimpse.randn(B, dq):requires_grad()
  local keys = glimpse.randn(B, L, dk):requires_grad()
  glimpse.set_rng_state(r1, r2)
  if not ok then check.fail(2, "%s: %s", fname, check.strip(p)) end
  local inputs, what = {q, keys}, {"the query", "the keys"}
  for _, n in ipairs(names) do
    inputs[#inputs + 1], what[#what + 1] = p[n], "parameter '" .. n .. "'"
  end
  local function f(qq, kk, ...)
    local pp = {}
    for i, n in ipairs(names) do pp[n] = select(i, ...) end
    return own_scores(name, spec, pp, own_precompute(name, spec, pp, kk), qq)
  end
  local gc = require("glimpse.autograd").gradcheck
  local good, err = pcall(gc, f, inputs, {eps = opts.eps, atol = opts.atol, rtol = opts.rtol})
  if not good then
    local msg = check.strip(err):gsub("^gradcheck: ", "")
    msg = msg:gsub("^input (%d+)", function(k) return what[tonumber(k)] or "input " .. k end)
    check.fail(2, "%s: score '%s': %s", fname, name, msg)
  end
  return true
end

local function score_def(name, level)
  local d = SCORE[name]
  if not d then
    check.fail(level + 1, "attention: unknown score %q (one of %s)", tostring(name),
               table.concat(M.SCORES, ", "))
  end
  return d
end

--- attention.precompute(score, p, keys (B,L,Dk)) -> cache (per sequence; reuse at every step)
function M.precompute(score, p, keys)
  check_tensor(keys, "keys", 3, 2)
  local cache = score_def(score, 2).precompute(p, keys)
  cache.score = score
  return cache
end

--- attention.step(score, p, cache, q (B,Dq), values (B,L,Dv), mask (B,L) or nil, opts)
---   -> ctx (B,Dv), alpha (B,L)
-- opts: prior, temperature, normaliser, extra (B,L,H) (additive/concat only: terms added
-- inside the tanh, e.g. location features or coverage).
function M.step(score, p, cache, q, values, mask, opts)
  opts = opts or {}
  if opts.extra and score ~= "additive" and score ~= "concat" then
    error("attention.step: extra terms need the additive or concat score, not " .. score, 2)
  end
  check_tensor(q, "query", 2, 2)
  return score_def(score, 2).step(p, cache, q, values, as_tensor(mask), opts)
end

-- a tensor field of attention.scores' p or cache, or an error naming it
local function scores_field(t, key, what)
  local v = t[key]
  if not glimpse.is_tensor(v) then
    check.fail(3, "attention.scores: %s.%s must be a tensor, got %s", what, key, type(v))
  end
  return v
end

--- attention.scores(score, p, cache, q) -> alpha-free raw scores e (B,L), composed from core
-- ops (a slow reference for tests and for looking at scores before normalisation).
function M.scores(score, p, cache, q)
  local def = score_def(score, 2)
  if type(p) ~= "table" then
    error("attention.scores: p must be a table of parameters, got " .. type(p), 2)
  end
  if type(cache) ~= "table" then
    error("attention.scores: cache must be the table precompute returned, got " .. type(cache), 2)
  end
  check_tensor(q, "q", 2, 2, "attention.scores")
  if def.own then
    if cache.k == nil or math.type(cache.L) ~= "integer" then
      check.fail(2, "attention.scores: cache must be the table precompute returned for '%s'",
                 score)
    end
    return def.scores(p, cache, q)
  elseif score == "dot" or score == "general" or score == "scaled_dot" then
    local ck = scores_field(cache, "k", "cache")
    local B, L, D = ck.shape[1], ck.shape[2], ck.shape[3]
    local e = ck:matmul(q:reshape(B, D, 1)):reshape(B, L)
    return cache.scale and e * cache.scale or e
  elseif score == "additive" or score == "concat" then
    local W, v = scores_field(p, "W", "p"), scores_field(p, "v", "p")
    local uk = scores_field(cache, "uk", "cache")
    local wq = score == "additive" and glimpse.linear(q, W, p.b)
               or glimpse.linear(q, concat_query_weight(p, cache, q))
    local B, L, H = uk.shape[1], uk.shape[2], uk.shape[3]
    local t = (uk + wq:reshape(B, 1, H)):tanh()
    return t:matmul(v:reshape(H, 1)):reshape(B, L)
  elseif score == "location" then
    local W = scores_field(p, "W", "p")
    local e = glimpse.linear(q, W, p.b)
    return (cache.L or W.shape[1]) < W.shape[1] and e:narrow(2, 1, cache.L) or e
  elseif score == "conv" then
    return M.conv_scores(scores_field(cache, "f", "cache"), q, scores_field(p, "Wq", "p"),
                         scores_field(p, "F2", "p"))
  else
    local qp = p.W and glimpse.linear(q, p.W) or q
    local k = scores_field(cache, "k", "cache")
    local B, L = k.shape[1], k.shape[2]
    local kn = (k * k):sum(3):sqrt():clamp(1e-8, math.huge)
    local qn = (qp * qp):sum(2, true):sqrt():clamp(1e-8, math.huge)
    local cos = k:matmul(qp:reshape(B, -1, 1)):reshape(B, L) / kn / qn
    local beta = p.beta
    if type(beta) == "number" then return cos * beta end
    if beta == nil and p.Wb then beta = glimpse.linear(q, p.Wb, p.bb):softplus() end
    return beta and cos * beta:reshape(B, 1) or cos
  end
end

return M
