-- tests/test_transformer.lua -- the Transformer layers (bindings/glimpse/nn/transformer.lua):
-- nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.PositionalEncoding.
--
-- Agreement with PyTorch (tests/fixtures/tf_*.safetensors, made by
-- tests/fixtures/fixtures_transformer.py: outputs and the gradients of sum(out * dout) with
-- respect to the inputs and every parameter, post- and pre-norm, relu and gelu, causal,
-- padding and arbitrary masks), finite-difference gradient checks on tiny layers, state_dict
-- names equal to PyTorch's, and properties (padding and future positions do not leak, the
-- mask path equals the fused one, dropout only in training).
local lu = require "luaunit"
local H = require "tests.helpers"
local glimpse = require "glimpse"

local nn = glimpse.nn

local T = {}

local FIXTURE_RTOL = 1e-4      -- agreement with PyTorch, relative to the tensor's scale
local SAME_TOL = 1e-5          -- two routes to the same float32 maths
local GC = {eps = 1e-2, atol = 2e-2, rtol = 3e-2}   -- gradcheck settings (float32)

local ENCODER_KEYS = {"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                      "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                      "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                      "norm1.bias", "norm2.weight", "norm2.bias"}
local DECODER_KEYS = {"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                      "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                      "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
                      "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias",
                      "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                      "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
                      "norm3.weight", "norm3.bias"}

-- ---------------------------------------------------------------------------------------
-- helpers

-- max |a - b| <= rtol * max(1, max |b|)
local function assert_close(a, b, rtol, what)
  H.assert_close(a, b, {rtol = rtol, floor = 1}, what)
end

local function gradcheck(fn, inputs, what)
  H.gradcheck(fn, inputs, {eps = GC.eps, atol = GC.atol, rtol = GC.rtol}, what)
end

local function leaf(...) return glimpse.randn(...):requires_grad() end

local function fixture(name)
  return glimpse.load("tests/fixtures/" .. name .. ".safetensors")
end

-- the layer a fixture describes, with its weights loaded, in evaluation mode
local function layer_from(cls, f, meta)
  local layer = cls(tonumber(meta.d_model), tonumber(meta.nhead), {
    dim_feedforward = tonumber(meta.dim_feedforward), activation = meta.activation,
    norm_first = meta.norm_first == "True", layer_norm_eps = tonumber(meta.layer_norm_eps)})
  local sd = {}
  for k, v in pairs(f) do
    local p = k:match("^weight%.(.*)$")
    if p then sd[p] = v end
  end
  layer:load_state_dict(sd)
  layer:evaluate()
  return layer
end

local function check_grads(layer, f, inputs, name)
  for pname, p in layer:named_parameters() do
    assert_close(p.grad, f["grad." .. pname], FIXTURE_RTOL, name .. " grad " .. pname)
  end
  for k, x in pairs(inputs) do
    assert_close(x.grad, f["grad." .. k], FIXTURE_RTOL, name .. " grad " .. k)
  end
end

-- ---------------------------------------------------------------------------------------
-- PyTorch agreement

local function check_encoder_fixture(name)
  local f, meta = fixture(name)
  local layer = layer_from(nn.TransformerEncoderLayer, f, meta)
  local src = f["input.src"]:requires_grad()
  local out = layer(src, {key_padding_mask = f["input.key_padding_mask"], mask = f["input.mask"],
                          causal = f["input.causal"]:item() == 1})
  assert_close(out, f["output.out"], FIXTURE_RTOL, name .. " out")
  ;(out * f["dout.out"]):sum():backward()
  check_grads(layer, f, {src = src}, name)
end

local function check_decoder_fixture(name)
  local f, meta = fixture(name)
  local layer = layer_from(nn.TransformerDecoderLayer, f, meta)
  local tgt, memory = f["input.tgt"]:requires_grad(), f["input.memory"]:requires_grad()
  local out = layer(tgt, memory, {causal = f["input.causal"]:item() == 1,
                                  tgt_key_padding_mask = f["input.tgt_key_padding_mask"],
                                  memory_key_padding_mask = f["input.memory_key_padding_mask"],
                                  memory_mask = f["input.memory_mask"]})
  assert_close(out, f["output.out"], FIXTURE_RTOL, name .. " out")
  ;(out * f["dout.out"]):sum():backward()
  check_grads(layer, f, {tgt = tgt, memory = memory}, name)
end

function T.test_encoder_post_norm_with_padding_and_attention_mask_matches_pytorch()
  check_encoder_fixture("tf_enc_post")
end

function T.test_encoder_pre_norm_gelu_causal_matches_pytorch()
  check_encoder_fixture("tf_enc_pre")
end

function T.test_decoder_post_norm_causal_with_padding_matches_pytorch()
  check_decoder_fixture("tf_dec_post")
end

function T.test_decoder_pre_norm_gelu_with_memory_mask_matches_pytorch()
  check_decoder_fixture("tf_dec_pre")
end

function T.test_state_dict_names_are_pytorchs_in_pytorchs_order()
  lu.assertEquals(nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 12}):state_dict_keys(),
                  ENCODER_KEYS)
  lu.assertEquals(nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 12}):state_dict_keys(),
                  DECODER_KEYS)
  -- and the fixtures, written from PyTorch's own state_dict, hold exactly these names
  for name, keys in pairs({tf_enc_post = ENCODER_KEYS, tf_dec_pre = DECODER_KEYS}) do
    local f = fixture(name)
    local have = {}
    for k in pairs(f) do
      local p = k:match("^weight%.(.*)$")
      if p then have[#have + 1] = p end
    end
    table.sort(have)
    local want = table.move(keys, 1, #keys, 1, {})
    table.sort(want)
    lu.assertEquals(have, want, name)
  end
  local lin = nn.TransformerEncoderLayer(8, 2):state_dict()["linear1.weight"]
  lu.assertEquals(lin.shape, {2048, 8}, "PyTorch's default dim_feedforward")
end

function T.test_sinusoidal_encoding_matches_pytorch_formula()
  local f = fixture("tf_posenc")
  local pe8 = nn.PositionalEncoding(8, {max_len = 50})
  assert_close(pe8.pe, f["output.pe8"], FIXTURE_RTOL, "pe d=8")
  assert_close(nn.PositionalEncoding(6, {max_len = 20}).pe, f["output.pe6"], FIXTURE_RTOL,
               "pe d=6")
  lu.assertEquals(pe8:state_dict_keys(), {}, "the sinusoid table is not saved")
  local x = glimpse.randn(2, 7, 8)
  assert_close(pe8(x), x + f["output.pe8"]:narrow(1, 1, 7), SAME_TOL, "x + pe")
  assert_close(pe8(x:narrow(2, 4, 1), 3), x:narrow(2, 4, 1) + f["output.pe8"]:narrow(1, 4, 1),
               SAME_TOL, "one step at offset 3")
end

-- ---------------------------------------------------------------------------------------
-- finite differences on tiny layers

local function tiny_params(layer)
  local list = {}
  for _, p in ipairs(layer:parameters()) do list[#list + 1] = p end
  return list
end

function T.test_encoder_gradients_match_finite_differences()
  glimpse.manual_seed(41)
  local kpm = glimpse.tensor{{1, 1, 1}, {1, 1, 0}}
  for _, norm_first in ipairs({false, true}) do
    local layer = nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 6, dropout = 0,
                                                    norm_first = norm_first,
                                                    activation = norm_first and "gelu" or "relu"})
    local x = leaf(2, 3, 4)
    local inputs = {x}
    for _, p in ipairs(tiny_params(layer)) do inputs[#inputs + 1] = p end
    gradcheck(function() return (layer(x, {key_padding_mask = kpm, causal = true})) end, inputs,
              "encoder norm_first=" .. tostring(norm_first))
    gradcheck(function()
      return (layer(x, {mask = {{1, 0, 1}, {1, 1, 0}, {0, 1, 1}}, key_padding_mask = kpm}))
    end, {x}, "encoder with an attention mask")
  end
end

function T.test_decoder_gradients_match_finite_differences()
  glimpse.manual_seed(42)
  local mkpm = glimpse.tensor{{1, 1, 1}, {1, 0, 0}}
  for _, norm_first in ipairs({false, true}) do
    local layer = nn.TransformerDecoderLayer(4, 2, {dim_feedforward = 6, dropout = 0,
                                                    norm_first = norm_first})
    local tgt, mem = leaf(2, 2, 4), leaf(2, 3, 4)
    local inputs = {tgt, mem}
    for _, p in ipairs(tiny_params(layer)) do inputs[#inputs + 1] = p end
    gradcheck(function()
      return (layer(tgt, mem, {causal = true, memory_key_padding_mask = mkpm}))
    end, inputs, "decoder norm_first=" .. tostring(norm_first))
  end
end

function T.test_learned_positions_are_a_trained_parameter()
  glimpse.manual_seed(43)
  local pe = nn.PositionalEncoding(4, {max_len = 6, learned = true})
  lu.assertEquals(pe:state_dict_keys(), {"weight"})
  lu.assertEquals(pe.weight.shape, {6, 4})
  local x = leaf(2, 3, 4)
  gradcheck(function() return pe(x, 2) end, {x, pe.weight}, "learned positions")
  pe:zero_grad()
  pe(glimpse.randn(1, 2, 4)):sum():backward()
  local g = pe.weight.grad:totable()
  lu.assertEquals(g[1], {1, 1, 1, 1})
  lu.assertEquals(g[3], {0, 0, 0, 0}, "positions past the input get no gradient")
end

-- ---------------------------------------------------------------------------------------
-- properties

function T.test_padding_and_future_positions_do_not_leak()
  glimpse.manual_seed(44)
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  local dec = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16, norm_first = true})
  enc:evaluate(); dec:evaluate()
  local kpm = glimpse.tensor{{1, 1, 1, 0, 0}}
  local x = glimpse.randn(1, 5, 8)
  local x2 = glimpse.cat({x:narrow(2, 1, 3), glimpse.randn(1, 2, 8) * 5}, 2)
  local a = enc(x, {key_padding_mask = kpm})
  local b = enc(x2, {key_padding_mask = kpm})
  assert_close(a:narrow(2, 1, 3), b:narrow(2, 1, 3), SAME_TOL, "padding leaked")
  local t = glimpse.randn(1, 4, 8)
  local t2 = glimpse.cat({t:narrow(2, 1, 2), glimpse.randn(1, 2, 8)}, 2)
  local ya = dec(t, a, {causal = true, memory_key_padding_mask = kpm})
  local yb = dec(t2, b, {causal = true, memory_key_padding_mask = kpm})
  assert_close(ya:narrow(2, 1, 2), yb:narrow(2, 1, 2), SAME_TOL, "the future leaked")
  local _, w = dec(t, a, {causal = true, memory_key_padding_mask = kpm, need_weights = true})
  lu.assertEquals(w.shape, {1, 4, 5})
  local wt = w:totable()[1]
  for i = 1, 4 do
    lu.assertEquals(wt[i][4], 0)
    lu.assertAlmostEquals(wt[i][1] + wt[i][2] + wt[i][3], 1, SAME_TOL)
  end
end

function T.test_mask_path_equals_the_fused_attention()
  glimpse.manual_seed(45)
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
  enc:evaluate()
  local x, kpm = glimpse.randn(2, 4, 8), glimpse.tensor{{1, 1, 1, 1}, {1, 1, 0, 0}}
  local tri = {{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}
  local a, wa = enc(x, {key_padding_mask = kpm, causal = true, need_weights = true})
  local b, wb = enc(x, {key_padding_mask = kpm, mask = tri, need_weights = true})
  assert_close(a, b, SAME_TOL, "causal flag vs triangular mask")
  assert_close(wa, wb, SAME_TOL, "their weights")
  local c = enc(x, {key_padding_mask = kpm, causal = true, mask = glimpse.ones(2, 4, 4)})
  assert_close(a, c, SAME_TOL, "an all-ones (B,T,S) mask changes nothing")
end

function T.test_dropout_acts_only_in_training()
  glimpse.manual_seed(46)
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0.5})
  local x = glimpse.randn(2, 4, 8)
  enc:evaluate()
  assert_close(enc(x), enc(x), 0, "evaluation is deterministic")
  enc:train()
  local d = (enc(x) - enc(x)):abs():max():item()
  lu.assertTrue(d > 1e-3, "training mode draws dropout masks")
end

function T.test_bad_arguments_are_errors_naming_the_layer()
  lu.assertErrorMsgContains("nn.TransformerEncoderLayer: nhead", nn.TransformerEncoderLayer, 6, 4)
  lu.assertErrorMsgContains("unknown option 'dim_ff'", nn.TransformerDecoderLayer, 8, 2,
                            {dim_ff = 4})
  lu.assertErrorMsgContains("activation", nn.TransformerEncoderLayer, 8, 2, {activation = "tanh"})
  local enc = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 4})
  lu.assertErrorMsgContains("src must be (B,T,8)", enc, glimpse.randn(2, 3, 6))
  lu.assertErrorMsgContains("key padding mask [2,4]", enc, glimpse.randn(2, 3, 8),
                            {key_padding_mask = glimpse.ones(2, 4)})
  lu.assertErrorMsgContains("attention mask [2,2]", enc, glimpse.randn(2, 3, 8),
                            {mask = glimpse.ones(2, 2)})
  local dec = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 4})
  lu.assertErrorMsgContains("batch size", dec, glimpse.randn(2, 3, 8), glimpse.randn(1, 3, 8))
  lu.assertErrorMsgContains("max_len=4", nn.PositionalEncoding(8, {max_len = 4}),
                            glimpse.randn(1, 5, 8))
end

return T
