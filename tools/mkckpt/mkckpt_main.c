/* mkckpt_main.c — the okv-mkckpt command: parses options into an
 * okv_mkckpt_spec (defaults from --arch) and calls okv_mkckpt_write.
 *
 *   okv-mkckpt --out DIR [--arch llama|qwen3|qwen2|gemma3] [--shards 2] ... */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkckpt.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: okv-mkckpt --out DIR [options]\n"
            "Writes a tiny random-weight HuggingFace checkpoint (config.json,\n"
            "generation_config.json, model.safetensors or an index + shards).\n\n"
            "  --out DIR               output directory (created if missing)\n"
            "  --arch NAME             llama (default), qwen3, qwen2, gemma3\n"
            "  --hidden N --layers N --heads N --kv-heads N --head-dim N\n"
            "  --intermediate N --vocab N\n"
            "  --tied | --untied       share lm_head with the embedding (default tied)\n"
            "  --rope-scaling KIND     none, linear, llama3\n"
            "  --rope-factor F         scaling factor (linear, llama3)\n"
            "  --rope-original-max N   llama3 original_max_position_embeddings\n"
            "  --rope-theta F\n"
            "  --dtype bf16|f16|f32    storage dtype (default bf16)\n"
            "  --seed N                weight seed (default 1)\n"
            "  --window N              sliding window (gemma3; qwen3/qwen2: enables it)\n"
            "  --sliding-pattern N     gemma3: every Nth layer is full (default 6)\n"
            "  --max-window-layers N   qwen: layers >= N slide\n"
            "  --query-pre-attn-scalar F  gemma3\n"
            "  --shards N              write N shards + model.safetensors.index.json\n"
            "  --bos N --eos N         special token ids\n"
            "Defaults for the dimensions follow the fixture of the chosen --arch.\n");
}

/* Parses a whole-string integer/float option value or exits with a message. */
static long parse_long(const char *opt, const char *v) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < INT_MIN || x > INT_MAX) {
        fprintf(stderr, "okv-mkckpt: --%s expects an integer, got '%s'\n", opt, v);
        exit(2);
    }
    return x;
}

static double parse_double(const char *opt, const char *v) {
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end) { fprintf(stderr, "okv-mkckpt: --%s expects a number, got '%s'\n", opt, v); exit(2); }
    return x;
}

enum {
    O_OUT = 256, O_ARCH, O_HIDDEN, O_LAYERS, O_HEADS, O_KV, O_HD, O_INTER, O_VOCAB, O_TIED, O_UNTIED,
    O_ROPE, O_RFACTOR, O_RORIG, O_THETA, O_DTYPE, O_SEED, O_WINDOW, O_PATTERN, O_MWL, O_QPAS, O_SHARDS,
    O_BOS, O_EOS, O_HELP
};

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", 1, 0, O_OUT}, {"arch", 1, 0, O_ARCH}, {"hidden", 1, 0, O_HIDDEN}, {"layers", 1, 0, O_LAYERS},
        {"heads", 1, 0, O_HEADS}, {"kv-heads", 1, 0, O_KV}, {"head-dim", 1, 0, O_HD},
        {"intermediate", 1, 0, O_INTER}, {"vocab", 1, 0, O_VOCAB}, {"tied", 0, 0, O_TIED},
        {"untied", 0, 0, O_UNTIED}, {"rope-scaling", 1, 0, O_ROPE}, {"rope-factor", 1, 0, O_RFACTOR},
        {"rope-original-max", 1, 0, O_RORIG}, {"rope-theta", 1, 0, O_THETA}, {"dtype", 1, 0, O_DTYPE},
        {"seed", 1, 0, O_SEED}, {"window", 1, 0, O_WINDOW}, {"sliding-pattern", 1, 0, O_PATTERN},
        {"max-window-layers", 1, 0, O_MWL}, {"query-pre-attn-scalar", 1, 0, O_QPAS},
        {"shards", 1, 0, O_SHARDS}, {"bos", 1, 0, O_BOS}, {"eos", 1, 0, O_EOS}, {"help", 0, 0, O_HELP},
        {0, 0, 0, 0},
    };
    /* first pass: --arch decides the defaults the other options override */
    okv_mkckpt_arch arch = OKV_MK_LLAMA;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--arch") && i + 1 < argc) v = argv[i + 1];
        else if (!strncmp(argv[i], "--arch=", 7)) v = argv[i] + 7;
        if (v && okv_mkckpt_parse_arch(v, &arch)) {
            fprintf(stderr, "okv-mkckpt: unknown --arch '%s' (llama, qwen3, qwen2, gemma3)\n", v);
            return 2;
        }
    }
    okv_mkckpt_spec spec;
    okv_mkckpt_default_spec(&spec, arch);
    const char *out = NULL;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, "", opts, &li)) != -1) {
        const char *name = li >= 0 ? opts[li].name : "option";
        switch (c) {
        case O_OUT: out = optarg; break;
        case O_ARCH: break; /* handled above */
        case O_HIDDEN: spec.hidden = (int)parse_long(name, optarg); break;
        case O_LAYERS: spec.layers = (int)parse_long(name, optarg); break;
        case O_HEADS: spec.heads = (int)parse_long(name, optarg); break;
        case O_KV: spec.kv_heads = (int)parse_long(name, optarg); break;
        case O_HD: spec.head_dim = (int)parse_long(name, optarg); break;
        case O_INTER: spec.intermediate = (int)parse_long(name, optarg); break;
        case O_VOCAB: spec.vocab = (int)parse_long(name, optarg); break;
        case O_TIED: spec.tied = true; break;
        case O_UNTIED: spec.tied = false; break;
        case O_ROPE:
            if (okv_mkckpt_parse_rope(optarg, &spec.rope_scaling)) {
                fprintf(stderr, "okv-mkckpt: unknown --rope-scaling '%s' (none, linear, llama3)\n", optarg);
                return 2;
            }
            break;
        case O_RFACTOR: spec.rope_factor = parse_double(name, optarg); break;
        case O_RORIG: spec.rope_original_max = (int)parse_long(name, optarg); break;
        case O_THETA: spec.rope_theta = parse_double(name, optarg); break;
        case O_DTYPE:
            if (okv_dtype_parse(optarg, &spec.dtype)) {
                fprintf(stderr, "okv-mkckpt: unknown --dtype '%s' (bf16, f16, f32)\n", optarg);
                return 2;
            }
            break;
        case O_SEED: spec.seed = (uint64_t)parse_long(name, optarg); break; /* int range is plenty */
        case O_WINDOW: spec.window = (int)parse_long(name, optarg); break;
        case O_PATTERN: spec.sliding_pattern = (int)parse_long(name, optarg); break;
        case O_MWL: spec.max_window_layers = (int)parse_long(name, optarg); break;
        case O_QPAS: spec.query_pre_attn_scalar = parse_double(name, optarg); break;
        case O_SHARDS: spec.shards = (int)parse_long(name, optarg); break;
        case O_BOS: spec.bos_id = (int)parse_long(name, optarg); break;
        case O_EOS: spec.eos_id = (int)parse_long(name, optarg); break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "okv-mkckpt: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    okv_error err = {0};
    if (okv_mkckpt_write(&spec, out, &err) != OKV_OK) {
        fprintf(stderr, "okv-mkckpt: %s\n", err.message);
        return 1;
    }
    printf("wrote %s checkpoint to %s (%d layers, hidden %d, %s%s)\n", okv_mkckpt_arch_name(spec.arch), out,
           spec.layers, spec.hidden, spec.shards > 1 ? "sharded" : "single file", spec.tied ? ", tied" : "");
    return 0;
}
