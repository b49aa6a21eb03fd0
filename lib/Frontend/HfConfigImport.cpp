//===- HfConfigImport.cpp - Hugging Face config.json -> moe IR ------------===//
//
// A Hugging Face config.json holds a model's hyper-parameters but no
// weights; this reads them into a ModelSpec (shape-only: every parameter
// gets an empty source) and hands it to the IR builder. It lets the
// scheduling passes and the simulator plan a real model (Mixtral,
// Qwen2-MoE, DeepSeek-V2/V3, Switch, or GPT/BERT/LLaMA-style MoE configs)
// without downloading it. docs/frontend/hf-config.md lists the fields read,
// the defaults and the approximations.
//
// Compiled with exceptions (nlohmann-json reports parse errors by
// throwing); a field error is thrown as ConfigError and becomes one MLIR
// diagnostic at the field's line in the file.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ModelSpec.h"
#include "moe/Frontend/OnnxImport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <cmath>
#include <set>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::frontend;
using json = nlohmann::json;

namespace {

/// The config families whose defaults differ (see docs/frontend/hf-config.md).
enum class Family {
  Mixtral,
  Qwen2Moe,
  DeepSeek,
  Switch,
  Gpt2,
  Bert,
  Llama,
  Generic
};

const char *familyName(Family f) {
  switch (f) {
  case Family::Mixtral:
    return "Mixtral";
  case Family::Qwen2Moe:
    return "Qwen2-MoE";
  case Family::DeepSeek:
    return "DeepSeek-V2/V3";
  case Family::Switch:
    return "Switch Transformers";
  case Family::Gpt2:
    return "GPT-2-style";
  case Family::Bert:
    return "BERT-style";
  case Family::Llama:
    return "LLaMA-style";
  case Family::Generic:
    return "generic";
  }
  return "generic";
}

/// A field error, thrown to the top of importHfConfigFile and reported there
/// at `loc`.
struct ConfigError {
  Location loc;
  std::string message;
};

/// The parsed config plus where each top-level key sits in the file, so
/// that a diagnostic points at the offending line.
class Config {
public:
  Config(json root, StringRef path, StringRef text, MLIRContext *ctx)
      : root(std::move(root)), path(path.str()), text(text.str()), ctx(ctx) {}

  const std::string &file() const { return path; }
  Location fileLoc() const { return locAt(0); }

  /// The line of `"key":` in the file (the file start when not found).
  Location keyLoc(StringRef key) const {
    size_t pos = text.find(("\"" + key + "\"").str());
    return NameLoc::get(StringAttr::get(ctx, key),
                        locAt(pos == std::string::npos ? 0 : pos));
  }
  Location named(StringRef name, Location at) const {
    return NameLoc::get(StringAttr::get(ctx, name), at);
  }

  [[noreturn]] void fail(Location loc, const std::string &msg) const {
    throw ConfigError{loc, msg};
  }
  [[noreturn]] void failKey(StringRef key, const std::string &msg) const {
    fail(keyLoc(key), "'" + key.str() + "' " + msg);
  }

  /// The first of `keys` present with a non-null value.
  std::optional<std::string>
  which(std::initializer_list<const char *> keys) const {
    for (const char *k : keys)
      if (root.contains(k) && !root[k].is_null())
        return std::string(k);
    return std::nullopt;
  }
  bool has(const char *key) const { return which({key}).has_value(); }

  std::optional<int64_t> getInt(std::initializer_list<const char *> keys,
                                int64_t min = 1) const {
    std::optional<std::string> key = which(keys);
    if (!key)
      return std::nullopt;
    const json &v = root[*key];
    // 4096.0 is still an integer in a hand-written config.
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())
      return check(*key, static_cast<int64_t>(v.get<double>()), min);
    if (!v.is_number_integer())
      failKey(*key, "must be an integer, got " + v.dump());
    return check(*key, v.get<int64_t>(), min);
  }
  int64_t requireInt(std::initializer_list<const char *> keys, const char *what,
                     int64_t min = 1) const {
    if (std::optional<int64_t> v = getInt(keys, min))
      return *v;
    std::string names;
    for (const char *k : keys)
      names += (names.empty() ? "'" : " or '") + std::string(k) + "'";
    fail(fileLoc(), "missing required field " + names + " (" + what + ") in '" +
                        path + "'");
  }
  std::optional<double>
  getDouble(std::initializer_list<const char *> keys) const {
    std::optional<std::string> key = which(keys);
    if (!key)
      return std::nullopt;
    const json &v = root[*key];
    if (!v.is_number())
      failKey(*key, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  std::optional<bool> getBool(const char *key) const {
    if (!has(key))
      return std::nullopt;
    if (!root[key].is_boolean())
      failKey(key,
              std::string("must be true or false, got ") + root[key].dump());
    return root[key].get<bool>();
  }
  std::optional<std::string>
  getString(std::initializer_list<const char *> keys) const {
    std::optional<std::string> key = which(keys);
    if (!key)
      return std::nullopt;
    if (!root[*key].is_string())
      failKey(*key, "must be a string, got " + root[*key].dump());
    return root[*key].get<std::string>();
  }
  std::set<int64_t> getIntList(const char *key) const {
    std::set<int64_t> out;
    if (!has(key))
      return out;
    if (!root[key].is_array())
      failKey(key, "must be a list of layer indices, got " + root[key].dump());
    for (const json &v : root[key]) {
      if (!v.is_number_integer())
        failKey(key,
                "must be a list of layer indices, got " + root[key].dump());
      out.insert(v.get<int64_t>());
    }
    return out;
  }
  const json &raw(const char *key) const { return root[key]; }

private:
  json root;
  std::string path, text;
  MLIRContext *ctx;

  int64_t check(const std::string &key, int64_t v, int64_t min) const {
    if (v < min)
      failKey(key, "must be at least " + std::to_string(min) + ", got " +
                       std::to_string(v));
    return v;
  }
  Location locAt(size_t offset) const {
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return FileLineColLoc::get(ctx, path, line, col);
  }
};

Family pickFamily(const Config &cfg) {
  std::string type =
      llvm::StringRef(cfg.getString({"model_type"}).value_or("")).lower();
  std::string arch;
  if (cfg.has("architectures") && cfg.raw("architectures").is_array() &&
      !cfg.raw("architectures").empty() &&
      cfg.raw("architectures")[0].is_string())
    arch =
        llvm::StringRef(cfg.raw("architectures")[0].get<std::string>()).lower();
  auto is = [&](std::initializer_list<const char *> keys) {
    for (const char *k : keys)
      if (llvm::StringRef(type).starts_with(k) ||
          llvm::StringRef(arch).starts_with(k))
        return true;
    return false;
  };
  // Order matters: "qwen2_moe" before a plain "qwen", "deepseek" before
  // anything LLaMA-like.
  if (is({"mixtral"}))
    return Family::Mixtral;
  if (is({"qwen2_moe", "qwen2moe", "qwen3_moe", "qwen3moe"}))
    return Family::Qwen2Moe;
  if (is({"deepseek"}))
    return Family::DeepSeek;
  if (is({"switch"}))
    return Family::Switch;
  if (is({"gpt2", "gpt_neo", "gptneo", "openai-gpt"}))
    return Family::Gpt2;
  if (is({"bert", "roberta"}))
    return Family::Bert;
  if (is({"llama", "mistral", "qwen2", "qwen"}))
    return Family::Llama;
  return Family::Generic;
}

/// Families whose models the dialect cannot represent, refused at their
/// `model_type` as the ONNX route refuses their exports (onnx-hf.test),
/// rather than read as a generic transformer: Jamba's Mamba layers,
/// encoder-decoder models, and DBRX, whose nested attn_config / ffn_config
/// (clip_qkv, kv_n_heads, moe_normalize_expert_weights, bias-free
/// LayerNorms) this route does not read: DBRX imports from its ONNX export.
/// (Switch's encoder stack imports, noted, as before.)
void refuseFamily(const Config &cfg) {
  std::string type =
      llvm::StringRef(cfg.getString({"model_type"}).value_or("")).lower();
  static const std::pair<const char *, const char *> refused[] = {
      {"jamba", "Jamba interleaves Mamba (state-space) layers with "
                "attention; the moe dialect has no Mamba layer"},
      {"dbrx", "DBRX keeps its attention and MoE settings in nested "
               "attn_config / ffn_config (clip_qkv, kv_n_heads, "
               "moe_normalize_expert_weights), which the config route does not "
               "read; import DBRX from its ONNX export (torch.onnx.export)"},
      {"nllb", "an encoder-decoder model; the importer takes one "
               "decoder-only or encoder-only stack"},
      {"gptsan", "a prefix-LM with Switch layers exported by no supported "
                 "torch; not represented"}};
  for (const auto &[prefix, why] : refused)
    if (llvm::StringRef(type).starts_with(prefix))
      cfg.failKey("model_type", "is '" + type + "': " + why);
  if (cfg.has("mamba_d_state") || cfg.has("mamba_expand"))
    cfg.failKey(cfg.has("mamba_d_state") ? "mamba_d_state" : "mamba_expand",
                "configures Mamba layers, which the moe dialect does not "
                "have");
}

Activation parseActivation(const Config &cfg, const std::string &key,
                           const std::string &name) {
  std::string n = llvm::StringRef(name).lower();
  if (n == "silu" || n == "swish" || n == "swiglu")
    return Activation::silu;
  // tanh-approximated variants run as exact GELU (docs/frontend/hf-config.md).
  if (n == "gelu" || n == "gelu_new" || n == "gelu_fast" ||
      n == "gelu_pytorch_tanh" || n == "gelu_python" || n == "gated-gelu" ||
      n == "geglu")
    return Activation::gelu;
  if (n == "relu" || n == "gated-relu")
    return Activation::relu;
  cfg.failKey(key, "names activation '" + name +
                       "', which the moe dialect does not have (it has "
                       "relu, gelu and silu)");
}

/// The func's name: the config's own file stem, or its directory for a
/// plain `config.json` (Hugging Face's layout).
std::string modelName(StringRef path) {
  StringRef stem = llvm::sys::path::stem(path);
  if (stem == "config") {
    StringRef dir =
        llvm::sys::path::filename(llvm::sys::path::parent_path(path));
    if (!dir.empty() && dir != "." && dir != "..")
      return dir.str();
  }
  return stem.str();
}

std::string formatNumber(double v) {
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0')
    s.pop_back();
  if (!s.empty() && s.back() == '.')
    s.pop_back();
  return s;
}

/// Everything readSpec reads from a config, field group by field group.
struct HfFields {
  Family family = Family::Generic;
  bool llamaLike = false;
  int64_t layers = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t denseHidden = 0, expertHidden = 0, sharedHidden = 0;
  int64_t experts = 0, topK = 1;
  NormKind norm = NormKind::layer;
  double eps = 1e-5;
  Activation act = Activation::gelu;
  bool gated = false, rotary = false, causal = true;
  double ropeTheta = 10000.0;
  /// Attention biases: Q/K/V (Qwen2's q/k/v_proj) and output.
  bool qkvBias = false, outBias = false;
  /// Qwen2-MoE's sigmoid gate on the shared expert.
  bool sharedGate = false;
  GateKind gate = GateKind::softmax_topk;
  bool normalize = false;
  std::optional<double> capacity;
  /// Learned absolute positions (GPT-2, BERT): table rows; 0: none.
  int64_t positions = 0;
  /// Post-norm blocks (BERT): norms after the residual adds, no final norm.
  bool postnorm = false;
  std::vector<std::string> &notes;
  explicit HfFields(std::vector<std::string> &notes) : notes(notes) {}
};

/// Sizes every family gives: blocks, M, vocabulary, heads, KV heads (GQA:
/// Mixtral, Qwen2), head size (explicit `head_dim` / T5's `d_kv`, DeepSeek's
/// MLA `qk_nope_head_dim + qk_rope_head_dim`, else M / heads).
void readAttentionSizes(const Config &cfg, ModelSpec &spec, HfFields &f) {
  f.layers = cfg.requireInt({"num_hidden_layers", "n_layer", "num_layers"},
                            "number of transformer blocks");
  spec.embed =
      cfg.requireInt({"hidden_size", "n_embd", "d_model"}, "embedding size M");
  spec.vocab = cfg.requireInt({"vocab_size"}, "vocabulary size");
  f.heads = cfg.requireInt({"num_attention_heads", "n_head", "num_heads"},
                           "attention heads");
  f.kvHeads =
      cfg.getInt({"num_key_value_heads", "num_kv_heads"}).value_or(f.heads);
  if (f.heads % f.kvHeads != 0)
    cfg.failKey("num_key_value_heads",
                "(" + std::to_string(f.kvHeads) + ") must divide the " +
                    std::to_string(f.heads) + " attention heads");
  // DeepSeek's multi-head latent attention is approximated as plain MHA
  // whose heads have MLA's query/key size (docs/frontend/hf-config.md).
  std::optional<int64_t> headDim;
  std::optional<int64_t> nope = cfg.getInt({"qk_nope_head_dim"}, 0),
                         rope = cfg.getInt({"qk_rope_head_dim"}, 0);
  if (nope || rope) {
    headDim = nope.value_or(0) + rope.value_or(0);
    f.notes.push_back("MLA attention approximated as MHA with head_dim " +
                      std::to_string(*headDim) +
                      " = qk_nope_head_dim + qk_rope_head_dim");
  } else {
    headDim = cfg.getInt({"head_dim", "d_kv"});
  }
  if (!headDim) {
    if (spec.embed % f.heads != 0)
      cfg.failKey(*cfg.which({"num_attention_heads", "n_head", "num_heads"}),
                  "(" + std::to_string(f.heads) +
                      ") does not divide the embedding size " +
                      std::to_string(spec.embed) +
                      "; give 'head_dim' explicitly");
    headDim = spec.embed / f.heads;
  }
  if (*headDim <= 0)
    cfg.fail(cfg.keyLoc("qk_nope_head_dim"), "head size must be positive");
  f.headDim = *headDim;
}

/// FFN sizes: the dense one (`intermediate_size`, GPT-2's `n_inner`, T5's
/// `d_ff`, else 4·M), the experts' (`moe_intermediate_size`: Qwen2-MoE,
/// DeepSeek), the routed expert count and k.
void readExpertSizes(const Config &cfg, const ModelSpec &spec, HfFields &f) {
  std::optional<int64_t> ffn =
      cfg.getInt({"intermediate_size", "n_inner", "d_ff"});
  f.denseHidden = ffn.value_or(4 * spec.embed);
  f.expertHidden = cfg.getInt({"moe_intermediate_size"}).value_or(f.denseHidden);
  const char *expertKeys = f.family == Family::Mixtral ? "num_local_experts"
                           : f.family == Family::DeepSeek ? "n_routed_experts"
                                                          : "num_experts";
  f.experts = cfg.requireInt(
      {"num_local_experts", "num_experts", "n_routed_experts"},
      (std::string("routed experts, e.g. '") + expertKeys + "'").c_str());
  // Switch's router is top-1 (Fedus et al. §2.1); the `top_k` that
  // transformers writes into every config is the generation default (50),
  // not experts per token.
  f.topK = f.family == Family::Switch
               ? cfg.getInt({"num_experts_per_tok"}).value_or(1)
               : cfg.requireInt({"num_experts_per_tok", "top_k", "moe_top_k"},
                                "experts per token k");
  if (f.topK > f.experts)
    cfg.failKey(*cfg.which({"num_experts_per_tok", "top_k", "moe_top_k"}),
                "(" + std::to_string(f.topK) + ") exceeds the " +
                    std::to_string(f.experts) + " routed experts");
  if (std::optional<int64_t> s =
          cfg.getInt({"shared_expert_intermediate_size"}, 0))
    f.sharedHidden = *s; // Qwen2-MoE
  else if (std::optional<int64_t> n = cfg.getInt({"n_shared_experts"}, 0))
    f.sharedHidden = *n * f.expertHidden; // DeepSeek
  // Qwen2-MoE scales its shared expert by sigmoid(shared_expert_gate(x)).
  f.sharedGate = f.family == Family::Qwen2Moe && f.sharedHidden > 0;
}

/// Norm kind and epsilon (RMSNorm for the LLaMA-like families and Switch,
/// `rms_norm_eps` / `layer_norm_eps` / GPT-2's `layer_norm_epsilon`), the
/// activation (`hidden_act`, GPT-2's `activation_function`, Switch's
/// `dense_act_fn` / T5's `feed_forward_proj`, "gated-*" meaning SwiGLU-style),
/// rotary (`rope_theta`) and causality (BERT: `is_decoder`).
void readLayerFlavour(const Config &cfg, HfFields &f) {
  if (f.llamaLike || f.family == Family::Switch ||
      (f.family == Family::Generic && cfg.has("rms_norm_eps")))
    f.norm = NormKind::rms;
  f.eps = cfg.getDouble({"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"})
              .value_or(f.family == Family::Switch ? 1e-6 : 1e-5);
  if (!(f.eps > 0))
    cfg.failKey(
        *cfg.which({"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"}),
        "must be positive");

  std::optional<std::string> actKey =
      cfg.which({"hidden_act", "activation_function", "dense_act_fn",
                 "feed_forward_proj"});
  f.act = f.llamaLike                  ? Activation::silu
          : f.family == Family::Switch ? Activation::relu
                                       : Activation::gelu;
  if (actKey) {
    std::optional<std::string> name = cfg.getString({actKey->c_str()});
    f.act = parseActivation(cfg, *actKey, *name);
  }
  // T5 / Switch spell a SwiGLU-style FFN "gated-gelu".
  f.gated = f.llamaLike ||
            (actKey && llvm::StringRef(*cfg.getString({actKey->c_str()}))
                           .starts_with("gated-"));
  if (std::optional<bool> g = cfg.getBool("gated_experts"))
    f.gated = *g;

  f.rotary =
      f.llamaLike || (f.family == Family::Generic && cfg.has("rope_theta"));
  f.ropeTheta = cfg.getDouble({"rope_theta"}).value_or(10000.0);
  // HF Qwen2(-MoE) always biases q/k/v_proj (not o_proj); LLaMA-style
  // configs say `attention_bias` (all four).
  f.qkvBias = f.family == Family::Qwen2Moe;
  if (std::optional<bool> b = cfg.getBool("attention_bias"))
    f.qkvBias = f.outBias = *b;
  f.causal = f.family != Family::Bert && f.family != Family::Switch;
  if (f.family == Family::Bert)
    if (std::optional<bool> dec = cfg.getBool("is_decoder"))
      f.causal = *dec;
  if (f.family == Family::Switch) {
    // transformers writes num_decoder_layers into every Switch config: a
    // model with a decoder is encoder-decoder (refused, as NLLB-MoE is); a
    // config without one describes an encoder stack, which imports.
    if (std::optional<int64_t> d = cfg.getInt({"num_decoder_layers"}, 0);
        d && *d > 0)
      cfg.failKey("num_decoder_layers",
                  "is " + std::to_string(*d) +
                      ": Switch Transformers with a decoder is an "
                      "encoder-decoder model; the importer builds one stack "
                      "(a config without decoder layers imports the encoder)");
    f.notes.push_back("Switch Transformers: the encoder stack only");
  }
}

/// The router: softmax or sigmoid (DeepSeek-V3's `scoring_func`),
/// renormalised top-k (Mixtral; `norm_topk_prob`: Qwen2-MoE, DeepSeek),
/// and the capacity: the config's own factor (`capacity_factor` and the
/// spellings of other code bases, or "dropless"), Switch's
/// `expert_capacity` C, else --onnx-capacity-factor, else dropless for the
/// dropless families and 1.0 for the rest.
void readRouting(const Config &cfg, const ImportOptions &opts,
                 const ModelSpec &spec, HfFields &f) {
  f.normalize = f.family == Family::Mixtral;
  if (std::optional<bool> n = cfg.getBool("norm_topk_prob"))
    f.normalize = *n;
  if (std::optional<std::string> scoring = cfg.getString({"scoring_func"})) {
    if (*scoring == "sigmoid") {
      f.gate = GateKind::sigmoid;
      if (f.normalize)
        f.notes.push_back("sigmoid scores are not renormalised "
                          "(norm_topk_prob has no moe.gate equivalent)");
      f.normalize = false;
    } else if (*scoring != "softmax") {
      cfg.failKey("scoring_func",
                  "is '" + *scoring + "'; only softmax and sigmoid are known");
    }
  }
  if (std::optional<std::string> m = cfg.getString({"topk_method"}))
    if (*m != "greedy")
      f.notes.push_back("topk_method '" + *m + "' approximated by plain top-k");
  if (std::optional<double> s = cfg.getDouble({"routed_scaling_factor"}))
    if (*s != 1.0)
      f.notes.push_back("routed_scaling_factor " + formatNumber(*s) +
                        " not represented");

  bool droplessFamily = f.family == Family::Mixtral ||
                        f.family == Family::Qwen2Moe ||
                        f.family == Family::DeepSeek;
  if (std::optional<std::string> key =
          cfg.which({"capacity_factor", "router_capacity_factor",
                     "expert_capacity_factor", "moe_capacity_factor"})) {
    const json &v = cfg.raw(key->c_str());
    if (v.is_string() && v.get<std::string>() == "dropless") {
      f.capacity = std::nullopt;
    } else {
      f.capacity = cfg.getDouble({key->c_str()});
      if (!(*f.capacity > 0) || std::isinf(*f.capacity))
        cfg.failKey(*key, "must be a positive number or \"dropless\"");
    }
  } else if (std::optional<int64_t> c = cfg.getInt({"expert_capacity"})) {
    // Switch gives C itself; f = C·E/(k·B·N), rounded as moe.gate rounds f.
    double cf = static_cast<double>(*c) * f.experts /
                (static_cast<double>(f.topK) * spec.batch * spec.seq);
    f.capacity = std::round(cf * 1e6) / 1e6;
    if (!(*f.capacity > 0))
      cfg.failKey("expert_capacity",
                  "gives a capacity factor that rounds to 0 for B=" +
                      std::to_string(spec.batch) +
                      " N=" + std::to_string(spec.seq));
    f.notes.push_back("expert_capacity " + std::to_string(*c) +
                      " as capacity factor " + formatNumber(*f.capacity));
  } else if (opts.capacityFactor) {
    f.capacity = *opts.capacityFactor;
  } else if (!droplessFamily) {
    f.capacity = 1.0;
  }
}

/// Which blocks route: DeepSeek's `first_k_dense_replace` and
/// `moe_layer_freq`, Qwen2-MoE's `decoder_sparse_step` and
/// `mlp_only_layers`, Switch's every (layers / num_sparse_encoder_layers)-th
/// encoder block from 1. Absent fields leave every block routed.
std::function<bool(int64_t)> routedBlocks(const Config &cfg,
                                          const HfFields &f) {
  int64_t firstDense = cfg.getInt({"first_k_dense_replace"}, 0).value_or(0);
  int64_t layerFreq = cfg.getInt({"moe_layer_freq"}).value_or(1);
  int64_t sparseStep = cfg.getInt({"decoder_sparse_step"}).value_or(1);
  std::set<int64_t> mlpOnly = cfg.getIntList("mlp_only_layers");
  int64_t switchStep = 1;
  if (f.family == Family::Switch) {
    int64_t sparse =
        cfg.getInt({"num_sparse_encoder_layers"}, 0).value_or(f.layers);
    switchStep = sparse > 0 ? std::max<int64_t>(f.layers / sparse, 1) : 0;
  }
  bool isSwitch = f.family == Family::Switch;
  return [=](int64_t i) {
    if (isSwitch)
      return switchStep > 0 && (switchStep == 1 || i % switchStep == 1);
    return i >= firstDense && i % layerFreq == 0 && (i + 1) % sparseStep == 0 &&
           !mlpOnly.count(i);
  };
}

/// GPT-2 and BERT learn a table row per position (`n_positions` /
/// `max_position_embeddings`); BERT's blocks are post-norm.
void readPositions(const Config &cfg, HfFields &f) {
  if (f.family != Family::Gpt2 && f.family != Family::Bert)
    return;
  if (std::optional<std::string> t = cfg.getString({"position_embedding_type"}))
    if (*t != "absolute")
      cfg.failKey("position_embedding_type",
                  "is '" + *t + "'; only learned absolute positions "
                  "(moe.position_embedding) are represented");
  f.positions =
      cfg.requireInt({"n_positions", "max_position_embeddings", "n_ctx"},
                     "learned positions (table rows)");
  if (f.family == Family::Bert) {
    f.postnorm = true;
    f.notes.push_back("BERT's embedding LayerNorm and token-type embeddings "
                      "are not represented");
  }
}

/// One block from the fields: attention, then routed experts or a dense
/// FFN; locations name the HF module (`layers.<i>.self_attn`, `.mlp`).
BlockSpec makeBlock(const Config &cfg, const HfFields &f, int64_t i,
                    bool routed) {
  Location expertsLoc = cfg.keyLoc(
      *cfg.which({"num_local_experts", "num_experts", "n_routed_experts"}));
  Location layersLoc =
      cfg.keyLoc(*cfg.which({"num_hidden_layers", "n_layer", "num_layers"}));
  std::string prefix = "layers." + std::to_string(i);
  BlockSpec block(cfg.named(prefix + ".self_attn", layersLoc));
  AttentionSpec &a = block.attention;
  a.heads = f.heads;
  a.kvHeads = f.kvHeads;
  a.headDim = f.headDim;
  a.causal = f.causal;
  a.rotary = f.rotary;
  a.rotaryBase = f.ropeTheta;
  a.qkvBias = f.qkvBias;
  a.outBias = f.outBias;
  if (cfg.has("rope_theta"))
    a.rotaryLoc = cfg.keyLoc("rope_theta");
  a.prenorm = f.norm;
  a.epsilon = f.eps;
  block.densePrenorm = f.norm;
  if (f.postnorm) { // BERT: norm(x + f(x)) instead of the pre-norms
    a.prenorm = block.densePrenorm = std::nullopt;
    a.epsilon = AttentionSpec(a.loc).epsilon; // no norm of its own
    block.postnorm = f.norm;
    block.postEpsilon = f.eps;
  }
  if (!routed) {
    block.denseHidden = f.denseHidden;
    block.denseActivation = f.act;
    block.denseGated = f.gated;
    block.denseEpsilon = f.eps;
    return block;
  }
  MoeLayerSpec moe(cfg.named(prefix + ".mlp", expertsLoc));
  moe.gate = f.gate;
  moe.experts = f.experts;
  moe.topK = f.topK;
  moe.capacityFactor = f.capacity;
  moe.normalize = f.normalize;
  moe.activation = f.act;
  moe.gated = f.gated;
  moe.hidden = f.expertHidden;
  moe.sharedHidden = f.sharedHidden;
  moe.sharedGate = f.sharedGate;
  moe.prenorm = f.postnorm ? std::nullopt : std::optional<NormKind>(f.norm);
  moe.epsilon = f.eps;
  block.moe = moe;
  return block;
}

ModelSpec readSpec(const Config &cfg, const ImportOptions &opts,
                   std::vector<std::string> &notes) {
  HfFields f(notes);
  refuseFamily(cfg);
  f.family = pickFamily(cfg);
  f.llamaLike = f.family == Family::Mixtral || f.family == Family::Qwen2Moe ||
                f.family == Family::DeepSeek || f.family == Family::Llama;
  ModelSpec spec;
  spec.name = modelName(cfg.file());
  spec.nodes = opts.nodes;
  spec.gpusPerNode = opts.gpusPerNode;
  readAttentionSizes(cfg, spec, f);
  readExpertSizes(cfg, spec, f);
  std::optional<int64_t> maxPos =
      cfg.getInt({"max_position_embeddings", "n_positions", "n_ctx"});
  spec.batch = opts.batch.value_or(4);
  spec.seq = opts.seq.value_or(std::min<int64_t>(maxPos.value_or(512), 512));
  readLayerFlavour(cfg, f);
  readPositions(cfg, f);
  readRouting(cfg, opts, spec, f);
  spec.positions = f.positions;

  auto routed = routedBlocks(cfg, f);
  for (int64_t i = 0; i < f.layers; ++i)
    spec.blocks.push_back(makeBlock(cfg, f, i, routed(i)));
  spec.finalNorm = f.postnorm ? std::nullopt : std::optional<NormKind>(f.norm);
  spec.finalEpsilon = f.eps;
  spec.tiedEmbeddings =
      cfg.getBool("tie_word_embeddings").value_or(!f.llamaLike);
  spec.embeddingLoc = cfg.named("embed_tokens", cfg.keyLoc("vocab_size"));
  spec.headLoc = cfg.named("lm_head", cfg.keyLoc("vocab_size"));

  std::string origin =
      "Hugging Face config '" + cfg.file() + "' (" + familyName(f.family);
  if (std::optional<std::string> t = cfg.getString({"model_type"}))
    origin += ", model_type " + *t;
  origin += "); shape-only, B=" + std::to_string(spec.batch) +
            " N=" + std::to_string(spec.seq) + ", f=" +
            (f.capacity ? formatNumber(*f.capacity) : std::string("dropless"));
  for (const std::string &note : notes)
    origin += "; " + note;
  spec.origin = origin;
  addDefaultParams(spec);
  return spec;
}

/// Line and column of byte `offset` in `text`, 1-based.
std::pair<unsigned, unsigned> lineCol(StringRef text, size_t offset) {
  unsigned line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

} // namespace

OwningOpRef<ModuleOp> mlir::moe::frontend::importHfConfigFile(
    llvm::StringRef path, const ImportOptions &options, MLIRContext *ctx) {
  Location fileLoc = FileLineColLoc::get(ctx, path, 0, 0);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    emitError(fileLoc) << "cannot read Hugging Face config '" << path
                       << "': " << buffer.getError().message();
    return nullptr;
  }
  StringRef text = (*buffer)->getBuffer();
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error &e) {
    auto [line, col] = lineCol(text, e.byte > 0 ? e.byte - 1 : 0);
    emitError(FileLineColLoc::get(ctx, path, line, col))
        << "'" << path << "' is not valid JSON: " << e.what();
    return nullptr;
  }
  if (!root.is_object()) {
    emitError(fileLoc) << "'" << path
                       << "' must hold a JSON object of model fields, got "
                       << root.type_name();
    return nullptr;
  }
  Config cfg(std::move(root), path, text, ctx);
  ModelSpec spec;
  try {
    std::vector<std::string> notes;
    spec = readSpec(cfg, options, notes);
  } catch (const ConfigError &e) {
    emitError(e.loc) << e.message;
    return nullptr;
  } catch (const json::exception &e) {
    // A type mismatch the readers above did not anticipate.
    emitError(fileLoc) << "'" << path << "': " << e.what();
    return nullptr;
  }
  return buildModule(spec, ctx);
}
