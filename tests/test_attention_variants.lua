-- tests/test_attention_variants.lua -- position schemes inside attention and self-attention
-- variants (bindings/glimpse/attention/positions.lua, mh_variants.lua, nn/multihead.lua,
-- nn/transformer.lua, models/transformer.lua's options).
--
-- Agreement with PyTorch (tests/fixtures/var_*.safetensors, made by
-- tests/fixtures/fixtures_variants.py: outputs, weights and the gradients of sum(out * dout)
-- for rope, alibi, t5, grouped/multi-query heads, window, top_k, linear and a combination),
-- finite-difference gradient checks of each option, the fused path still taken when every
-- option is off, position offsets (one row at position t equals row t of the whole
-- sequence), and errors for bad options.
local lu = require "luaunit"
local H = require "tests.helpers"
local glimpse = require "glimpse"

local nn, att = glimpse.nn, glimpse.attention
local positions = att.positions

local T = {}

local FIXTURE_RTOL = 1e-4      -- agreement with PyTorch, relative to the tensor's scale
local SAME_TOL = 1e-5          -- two routes to the same float32 maths
local GC = {eps = 1e-2, atol = 2e-2, rtol = 3e-2}   -- gradcheck settings (float32)

local PAD = {{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}}
local WEIGHTS = {"q_proj_weight", "k_proj_weight", "v_proj_weight", "q_proj_bias",
                 "k_proj_bias", "v_proj_bias", "out_weight", "out_bias",
                 "relative_attention_bias"}

local function assert_close(a, b, rtol, what)
  H.assert_close(a, b, {rtol = rtol, floor = 1}, what)
end

local function gradcheck(fn, inputs, what)
  H.gradcheck(fn, inputs, GC, what)
end

local function leaf(...) return glimpse.randn(...):requires_grad() end

local function fixture(name)
  return glimpse.load("tests/fixtures/" .. name .. ".safetensors")
end

-- attention.multi_head's parameters and options from a fixture's tensors and metadata
local function case_from(f, meta)
  local p = {heads = tonumber(meta.heads), kv_heads = tonumber(meta.kv_heads)}
  for _, n in ipairs(WEIGHTS) do
    if f["weight." .. n] then p[n] = f["weight." .. n]:requires_grad() end
  end
  local o = {causal = meta.causal == "true", positions = meta.positions,
             attention = meta.attention, window = math.tointeger(tonumber(meta.window)),
             top_k = math.tointeger(tonumber(meta.top_k)),
             q_start = math.tointeger(tonumber(meta.q_start)),
             k_start = math.tointeger(tonumber(meta.k_start)),
             rope_base = tonumber(meta.rope_base),
             t5_max_distance = math.tointeger(tonumber(meta.t5_max_distance)),
             mask = f["input.mask"]}
  return p, o
end

local function check_fixture(name)
  local f, meta = fixture(name)
  local p, o = case_from(f, meta)
  local x = f["input.x"]:requires_grad()
  local kv = f["input.kv"] and f["input.kv"]:requires_grad()
  local out, w = att.multi_head(x, kv, kv, p, o)
  assert_close(out, f["output.out"], FIXTURE_RTOL, name .. " out")
  if f["output.weights"] then assert_close(w, f["output.weights"], FIXTURE_RTOL, name .. " w") end
  ;(out * f["dout.out"]):sum():backward()
  assert_close(x.grad, f["grad.x"], FIXTURE_RTOL, name .. " grad x")
  if kv then assert_close(kv.grad, f["grad.kv"], FIXTURE_RTOL, name .. " grad kv") end
  for _, n in ipairs(WEIGHTS) do
    if p[n] then assert_close(p[n].grad, f["grad." .. n], FIXTURE_RTOL, name .. " grad " .. n) end
  end
  return f, meta, p, o
end

-- ---------------------------------------------------------------------------------------
-- PyTorch agreement

function T.test_rope_with_offsets_and_padding_matches_pytorch() check_fixture("var_rope") end
function T.test_rope_one_row_over_earlier_keys_matches_pytorch() check_fixture("var_rope_step") end
function T.test_alibi_causal_six_heads_matches_pytorch() check_fixture("var_alibi_causal") end
function T.test_alibi_bidirectional_matches_pytorch() check_fixture("var_alibi_enc") end
function T.test_t5_bidirectional_buckets_match_pytorch() check_fixture("var_t5_enc") end
function T.test_t5_causal_buckets_match_pytorch() check_fixture("var_t5_causal") end
function T.test_grouped_query_heads_match_repeated_heads() check_fixture("var_gqa") end
function T.test_multi_query_cross_attention_matches_repeated_heads() check_fixture("var_mqa") end
function T.test_window_matches_pytorch() check_fixture("var_window") end
function T.test_causal_window_matches_pytorch() check_fixture("var_window_causal") end
function T.test_top_k_matches_pytorch() check_fixture("var_topk") end
function T.test_linear_attention_matches_pytorch() check_fixture("var_linear") end
function T.test_causal_linear_attention_matches_running_sums()
  check_fixture("var_linear_causal")               -- the weights asked for: the masked product
  local f, meta = fixture("var_linear_causal")
  local p, o = case_from(f, meta)
  o.need_weights = false                            -- no weights: the running sums (cumsum)
  local x = f["input.x"]:requires_grad()
  local out = att.multi_head(x, nil, nil, p, o)
  assert_close(out, f["output.out"], FIXTURE_RTOL, "running sums out")
  ;(out * f["dout.out"]):sum():backward()
  assert_close(x.grad, f["grad.x"], FIXTURE_RTOL, "running sums grad x")
  assert_close(p.k_proj_weight.grad, f["grad.k_proj_weight"], FIXTURE_RTOL, "running sums grad k")
  -- grouped heads and padding: the running sums equal the masked product
  glimpse.manual_seed(78)
  local mha = nn.MultiheadAttention(8, 4, {kv_heads = 2, attention = "linear", causal = true})
  local xs, pad = glimpse.randn(2, 5, 8), glimpse.tensor(PAD)
  local a = mha(xs, nil, nil, pad, {need_weights = false})
  local b = mha(xs, nil, nil, pad, {need_weights = true})
  assert_close(a, b, SAME_TOL, "running sums vs masked product")
end

function T.test_cumsum_is_the_running_sum_and_matches_finite_differences()
  local x = glimpse.tensor{{1, 2, 3}, {4, 5, 6}}
  lu.assertEquals(x:cumsum(2):totable(), {{1, 3, 6}, {4, 9, 15}})
  lu.assertEquals(x:cumsum(1):totable(), {{1, 2, 3}, {5, 7, 9}})
  lu.assertEquals(x:cumsum(-1):totable(), x:cumsum(2):totable())
  glimpse.manual_seed(79)
  local y, w = leaf(2, 3, 4), glimpse.randn(2, 3, 4)
  for d = 1, 3 do gradcheck(function() return y:cumsum(d) * w end, {y}, "cumsum dim " .. d) end
  lu.assertErrorMsgContains("dim 3 out of range", x.cumsum, x, 3)
end
function T.test_rope_grouped_window_top_k_together_match_pytorch() check_fixture("var_combo") end

function T.test_packed_projection_gives_the_same_as_separate_ones()
  for _, name in ipairs({"var_rope", "var_alibi_enc", "var_window", "var_topk", "var_linear"}) do
    local f, meta = fixture(name)
    local p, o = case_from(f, meta)
    local packed = {heads = p.heads, out_weight = p.out_weight, out_bias = p.out_bias,
                    in_proj_weight = glimpse.cat({p.q_proj_weight, p.k_proj_weight,
                                                  p.v_proj_weight}, 1),
                    in_proj_bias = glimpse.cat({p.q_proj_bias, p.k_proj_bias, p.v_proj_bias}, 1)}
    local out = att.multi_head(f["input.x"], nil, nil, packed, o)
    assert_close(out, f["output.out"], FIXTURE_RTOL, name .. " packed")
  end
end

function T.test_module_with_grouped_heads_loads_the_fixture_weights()
  local f, meta = fixture("var_gqa")
  local mha = nn.MultiheadAttention(8, 4, {kv_heads = 2, causal = true})
  lu.assertEquals(mha:state_dict_keys(), {"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                          "q_proj_bias", "k_proj_bias", "v_proj_bias",
                                          "out_proj.weight", "out_proj.bias"})
  local sd = {["out_proj.weight"] = f["weight.out_weight"], ["out_proj.bias"] = f["weight.out_bias"]}
  for _, n in ipairs({"q_proj_weight", "k_proj_weight", "v_proj_weight", "q_proj_bias",
                      "k_proj_bias", "v_proj_bias"}) do
    sd[n] = f["weight." .. n]
  end
  mha:load_state_dict(sd)
  local out, w = mha(f["input.x"], nil, nil, f["input.mask"])
  assert_close(out, f["output.out"], FIXTURE_RTOL, "module out")
  assert_close(w, f["output.weights"], FIXTURE_RTOL, "module weights")
  lu.assertEquals(meta.kv_heads, "2")
end

function T.test_alibi_slopes_and_t5_buckets_match_the_reference_code()
  local f = fixture("var_tables")
  for n = 1, 16 do
    local want = f["output.slopes" .. n]:totable()
    local have = positions.alibi_slopes(n)
    lu.assertEquals(#have, n)
    for i = 1, n do lu.assertAlmostEquals(have[i], want[i], 1e-7 * want[i], "slopes " .. n) end
  end
  local rel, bi, uni = f["input.rel"]:totable(), f["output.t5_bi"]:totable(),
                       f["output.t5_uni"]:totable()
  for i, r in ipairs(rel) do
    r = math.tointeger(r)
    lu.assertEquals(positions.t5_bucket(r, true), bi[i], "bidirectional rel " .. r)
    lu.assertEquals(positions.t5_bucket(r, false), uni[i], "unidirectional rel " .. r)
  end
end

-- ---------------------------------------------------------------------------------------
-- finite differences, one per option

local function tiny(heads, kv)
  local d, dh = 4, 4 // heads
  local p = {heads = heads, kv_heads = kv, q_proj_weight = leaf(d, d),
             k_proj_weight = leaf((kv or heads) * dh, d), v_proj_weight = leaf((kv or heads) * dh, d),
             q_proj_bias = leaf(d), out_weight = leaf(d, d)}
  local list = {p.q_proj_weight, p.k_proj_weight, p.v_proj_weight, p.q_proj_bias, p.out_weight}
  return p, list
end

function T.test_every_option_matches_finite_differences()
  local cases = {
    {"rope", {positions = "rope", q_start = 2, k_start = 2}},
    {"alibi", {positions = "alibi", causal = true}},
    {"t5", {positions = "t5", t5_max_distance = 4}},
    {"kv_heads 1", {causal = true}, 1},
    {"window", {window = 2, causal = true}},
    {"top_k", {top_k = 2}},
    {"linear", {attention = "linear"}},
    {"linear causal", {attention = "linear", causal = true}},
    {"linear causal running sums", {attention = "linear", causal = true, need_weights = false}},
    {"linear gqa running sums", {attention = "linear", causal = true, need_weights = false}, 1},
    {"rope + gqa + window", {positions = "rope", window = 2}, 1},
  }
  for i, c in ipairs(cases) do
    glimpse.manual_seed(70 + i)
    local p, inputs = tiny(2, c[3])
    if c[2].positions == "t5" then
      p.relative_attention_bias = leaf(6, 2)
      inputs[#inputs + 1] = p.relative_attention_bias
    end
    local x = leaf(2, 4, 4)
    table.insert(inputs, 1, x)
    local o = c[2]
    o.mask = glimpse.tensor{{1, 1, 1, 1}, {1, 1, 1, 0}}
    if o.window and not o.causal then o.mask = nil end
    gradcheck(function() return (att.multi_head(x, nil, nil, p, o)) end, inputs, c[1])
  end
end

function T.test_t5_table_and_projections_through_the_layer_match_finite_differences()
  glimpse.manual_seed(80)
  local enc = nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 6, dropout = 0,
                                                activation = "gelu", positions = "t5",
                                                t5_buckets = 6, kv_heads = 1})
  local x = leaf(2, 3, 4)
  local inputs = {x}
  for _, p in ipairs(enc:parameters()) do inputs[#inputs + 1] = p end
  gradcheck(function() return (enc(x, {causal = true})) end, inputs, "encoder t5 kv_heads 1")
end

-- ---------------------------------------------------------------------------------------
-- positions and offsets

function T.test_rope_scores_depend_only_on_the_distance()
  glimpse.manual_seed(81)
  local q, k = glimpse.randn(1, 1, 1, 8), glimpse.randn(1, 1, 1, 8)
  local function score(m, n)
    return (positions.rope(q, m) * positions.rope(k, n)):sum():item()
  end
  lu.assertAlmostEquals(score(3, 1), score(10, 8), 1e-4)
  lu.assertAlmostEquals(score(0, 5), score(7, 12), 1e-4)
  lu.assertTrue(math.abs(score(3, 1) - score(1, 3)) > 1e-4, "the direction matters")
  assert_close(positions.rope(q, 0), q, SAME_TOL, "position 0 is not turned")
end

-- the last row of causal self-attention over T rows equals one query row at position T-1
-- over the same keys (what a key/value cache computes), for every scheme
function T.test_one_row_at_an_offset_equals_the_last_row_of_the_whole_sequence()
  for i, scheme in ipairs({"rope", "alibi", "t5", "none"}) do
    for _, extra in ipairs({{}, {window = 2}, {kv_heads = 1}}) do
      glimpse.manual_seed(90 + i)
      local o = {positions = scheme, causal = true, kv_heads = extra.kv_heads,
                 window = extra.window}
      local mha = nn.MultiheadAttention(8, 2, o)
      local x = glimpse.randn(2, 5, 8)
      local full = mha(x)
      local last = x:narrow(2, 5, 1)
      local step = mha(last, x, x, nil, {q_start = 4, k_start = 0})
      assert_close(step, full:narrow(2, 5, 1), SAME_TOL, scheme .. " " .. tostring(extra.window))
    end
  end
end

function T.test_window_hides_far_keys_and_top_k_keeps_k()
  glimpse.manual_seed(95)
  local mha = nn.MultiheadAttention(8, 2, {window = 2})
  local _, w = mha(glimpse.randn(1, 5, 8))
  local wt = w:totable()[1]
  for i = 1, 5 do
    for j = 1, 5 do
      if math.abs(i - j) >= 2 then lu.assertEquals(wt[i][j], 0) end
    end
  end
  local one = nn.MultiheadAttention(8, 1, {top_k = 2})
  local _, w1 = one(glimpse.randn(2, 6, 8))
  for _, row in ipairs(w1:reshape(12, 6):totable()) do
    local nz = 0
    for _, v in ipairs(row) do if v > 0 then nz = nz + 1 end end
    lu.assertEquals(nz, 2)
  end
end

-- ---------------------------------------------------------------------------------------
-- the fused path

local function count_fused(fn)
  local C = glimpse._attention
  local real, n = C.mh_packed, 0
  C.mh_packed = function(...) n = n + 1; return real(...) end
  local ok, err = pcall(fn)
  C.mh_packed = real
  if not ok then error(err, 0) end
  return n
end

function T.test_fused_path_is_taken_when_every_option_is_off()
  glimpse.manual_seed(96)
  local x = glimpse.randn(2, 4, 8)
  local plain = nn.MultiheadAttention(8, 2, {causal = true})
  lu.assertEquals(count_fused(function() plain(x) end), 1, "plain module")
  lu.assertEquals(count_fused(function()
    plain(x, nil, nil, nil, {q_start = 3, k_start = 3})
  end), 1, "equal offsets change nothing")
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 8, positions = "none"})
  enc:evaluate()
  lu.assertEquals(count_fused(function() enc(x) end), 1, "encoder layer")
  for _, o in ipairs({{positions = "rope"}, {kv_heads = 1}, {window = 2}, {top_k = 2},
                      {attention = "linear"}}) do
    local m = nn.MultiheadAttention(8, 2, o)
    lu.assertEquals(count_fused(function() m(x) end), 0, next(o))
  end
  -- the general path with nothing asked of it computes what the fused op does
  local p = {heads = 2, in_proj_weight = plain.in_proj_weight, in_proj_bias = plain.in_proj_bias,
             out_weight = plain.out_proj.weight, out_bias = plain.out_proj.bias}
  local a, wa = att.multi_head(x, nil, nil, p, {causal = true})
  local b, wb = att.multi_head(x, nil, nil, p, {causal = true, attn_mask = glimpse.ones(4, 4)})
  assert_close(a, b, SAME_TOL, "fused vs general out")
  assert_close(wa, wb, SAME_TOL, "fused vs general weights")
end

function T.test_capture_records_every_variant_per_head()
  glimpse.manual_seed(98)
  local x = glimpse.randn(2, 5, 8)
  for _, o in ipairs({{positions = "rope", kv_heads = 1}, {positions = "t5", window = 2},
                      {top_k = 2}, {attention = "linear", causal = true}}) do
    local enc = nn.TransformerEncoderLayer(8, 4, {dim_feedforward = 8, dropout = 0,
                                                  positions = o.positions, kv_heads = o.kv_heads,
                                                  window = o.window, top_k = o.top_k,
                                                  attention = o.attention})
    local maps = att.capture(function() enc(x, {causal = o.causal}) end, enc)
    local m = maps["self_attn"]
    lu.assertNotNil(m, next(o))
    lu.assertEquals(m.shape, {2, 4, 5, 5}, next(o))
    assert_close(m:sum(4), glimpse.ones(2, 4, 5), 1e-4, "rows sum to 1")
  end
end

-- ---------------------------------------------------------------------------------------
-- layers and the model

function T.test_layers_and_model_take_every_scheme()
  local ct = require "datasets.compare_tasks"
  local ds = ct.task("reversal"):train_set(24, 1)
  local b = ds:collate({1, 2, 3})
  local dir = H.tmpdir()
  for _, c in ipairs({{positions = "rope", kv_heads = 1}, {positions = "alibi", window = 3},
                      {positions = "t5", top_k = 3}, {positions = "none", attention = "linear"}}) do
    glimpse.manual_seed(97)
    local cfg = {dataset = ds, d = 8, heads = 2, layers = 1, ff = 8, max_len = 64}
    for k, v in pairs(c) do cfg[k] = v end
    local m = glimpse.models.Transformer(cfg)
    local loss = m:loss(b)
    loss:backward()
    lu.assertTrue(loss:item() > 0)
    lu.assertStrContains(tostring(m), "positions=" .. c.positions)
    local path = dir .. "/t-" .. c.positions .. ".safetensors"
    m:save(path)
    local m2 = glimpse.models.Transformer.load(path)
    lu.assertEquals(m2.config.positions, c.positions)
    lu.assertEquals(m2.config.kv_heads, c.kv_heads)
    m:evaluate()
    assert_close(m2:loss(b), m:loss(b), SAME_TOL, c.positions .. " reloaded")
    local outs = m:decode(b, {max_len = 4})
    lu.assertEquals(#outs, 3)
  end
end

-- ---------------------------------------------------------------------------------------
-- errors

function T.test_bad_options_are_errors_naming_the_function()
  local x = glimpse.randn(1, 3, 8)
  local mha = nn.MultiheadAttention(8, 2)
  local p = {heads = 2, in_proj_weight = mha.in_proj_weight, out_weight = mha.out_proj.weight}
  lu.assertErrorMsgContains("attention.multi_head: window needs attention = 'softmax'",
                            att.multi_head, x, nil, nil, p, {window = 2, attention = "linear"})
  lu.assertErrorMsgContains("did you mean 'top_k'", att.multi_head, x, nil, nil, p, {topk = 2})
  lu.assertErrorMsgContains("did you mean 'rope'", att.multi_head, x, nil, nil, p,
                            {positions = "rop"})
  lu.assertErrorMsgContains("needs p.relative_attention_bias", att.multi_head, x, nil, nil, p,
                            {positions = "t5"})
  lu.assertErrorMsgContains("nn.MultiheadAttention: kv_heads must be a positive integer dividing",
                            nn.MultiheadAttention, 8, 4, {kv_heads = 3})
  lu.assertErrorMsgContains("nn.MultiheadAttention: positions = 'rope' needs an even head width",
                            nn.MultiheadAttention, 6, 2, {positions = "rope"})
  lu.assertErrorMsgContains("nn.MultiheadAttention: top_k needs attention = 'softmax'",
                            nn.MultiheadAttention, 8, 2, {top_k = 2, attention = "linear"})
  lu.assertErrorMsgContains("did you mean 'window'", nn.TransformerEncoderLayer, 8, 2,
                            {windw = 2})
  lu.assertErrorMsgContains("nn.TransformerDecoderLayer: positions = 'alibi' needs attention",
                            nn.TransformerDecoderLayer, 8, 2,
                            {positions = "alibi", attention = "linear"})
  local ct = require "datasets.compare_tasks"
  local ds = ct.task("reversal"):train_set(4, 1)
  lu.assertErrorMsgContains("unknown positions 'rotary'", glimpse.models.Transformer,
                            {dataset = ds, d = 8, heads = 2, positions = "rotary"})
  lu.assertErrorMsgContains("Transformer: kv_heads", glimpse.models.Transformer,
                            {dataset = ds, d = 8, heads = 2, kv_heads = 3})
  lu.assertErrorMsgContains("attention.positions.rope: the head width must be even",
                            positions.rope, glimpse.randn(2, 3))
  lu.assertErrorMsgContains("key padding mask", att.multi_head, x, nil, nil, p,
                            {window = 2, mask = glimpse.ones(2, 3)})
end

return T
