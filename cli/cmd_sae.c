/* features, sae-eval: an SAE's features on a model's activations (SPEC §19). */
#include "cli.h"
#include "study_features.h"

CLI_PRINT(features)

/* The forwards of features and train-sae stop at the SAE's layer. */
static int features_layers(const void *opts)
{
    return ((const hs_features_opts *)opts)->sae.layer + 1;
}

static int train_sae_layers(const void *opts)
{
    return ((const hs_train_sae_opts *)opts)->sae.layer + 1;
}

static int cmd_features(int argc, char **argv)
{
    hs_features_opts fo = { .top = 10, .dfa = -1 };
    cli_study s = { &hs_features_kind, &fo, { .batch = 4, .need_batch = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_features,
                    .layers = features_layers };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        { "--sae", OPT_STR, &fo.sae_dir, 0, "DIR", "SAELens directory (cfg.json, sae_weights.safetensors)", 0 },
        { "--top", OPT_INT, &fo.top, 1, "N", "top activating examples a feature (default 10)", 0 },
        { "--dfa-examples", OPT_INT, &fo.dfa, -1, "K", "direct feature attribution of each feature's first K examples (default: all; 0: none)", 0 },
        { "--out", OPT_STR, &fo.out, 0, "FILE.h5", "also the activations in CSR (/features/{indptr,indices,values})", 0 },
        { "--force", OPT_FLAG, &fo.force, 0, NULL, "replace an existing --out", 0 },
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        CLI_STUDY_TAIL_OPTS(s),
    };
    const int rc = cli_study_run(&s, o, CLI_N(o), argc, argv);
    hs_sae_free(&fo.sae);
    return rc;
}

HS_COMMAND(cmd_features_record) = {
    .name = "features",
    .flags = CMD_SHARDS,
    .order = 151,
    .summary = "An SAE's features on a model's activations: frequency, head share, top examples, DFA.",
    .usage = "headscope features --model DIR --sae DIR (--data FILE | --text FILE) --db FILE [options]",
    .details =
        "The SAE (SAELens's format: standard, jumprelu or topk) reads its hook\n"
        "(blocks.L.attn.hook_z, hook_resid_pre, hook_resid_post, hook_attn_out,\n"
        "hook_mlp_out) on every token of the data. Per feature: frequency (share of tokens\n"
        "with f > 0) and mean_act (over those) with head -1, head_share per head of a\n"
        "hook_z SAE (Kissane et al.: the share of its decoder norm in each head's block),\n"
        "into feature_metrics; its --top N examples by value (ties by sequence, position)\n"
        "into feature_examples; for a hook_z SAE the direct feature attribution of each\n"
        "example, DFA(h, s | t) = att_h[t, s] (v_h[s] . W_enc[h block, f]), into\n"
        "feature_dfa (zeros left out), summing over (h, s) to pre_f(t) - b_enc[f]\n"
        "(+ b_dec . W_enc[:, f] when b_dec is applied). --out writes the activations in\n"
        "CSR over the tokens (sequence-major) with the tokens.\n\n"
        "example: headscope features --model runs/tiny --sae sae/ --data val.bin --db runs.db\n"
        "         --seq-len 64 --top 20 --out feats.h5\n",
    .run = cmd_features,
};

CLI_PRINT(sae_eval)

static int cmd_sae_eval(int argc, char **argv)
{
    hs_sae_eval_opts eo = { 0 };
    cli_study s = { &hs_sae_eval_kind, &eo, { .batch = 4, .need_batch = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_sae_eval };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        { "--sae", OPT_STR, &eo.sae_dir, 0, "DIR", "SAELens directory (cfg.json, sae_weights.safetensors)", 0 },
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        CLI_STUDY_TAIL_OPTS(s),
    };
    const int rc = cli_study_run(&s, o, CLI_N(o), argc, argv);
    hs_sae_free(&eo.sae);
    return rc;
}

HS_COMMAND(cmd_sae_eval_record) = {
    .name = "sae-eval",
    .order = 152,
    .summary = "An SAE's L0, explained variance, MSE and CE-loss score, as SAELens computes them.",
    .usage = "headscope sae-eval --model DIR --sae DIR (--data FILE | --text FILE) --db FILE [options]",
    .details =
        "Per batch three forwards: clean, with the hooked activation replaced by the SAE's\n"
        "reconstruction, and with it replaced by 0. l0 = mean active features a token;\n"
        "explained_variance = 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2 over the\n"
        "tokens; mse = mean over elements; ce_loss_score = (L_zero - L_sae) / (L_zero -\n"
        "L_clean), its stderr by the delta method over sequences. The numbers go to\n"
        "feature_metrics (feature -1, the hook's layer).\n\n"
        "example: headscope sae-eval --model runs/tiny --sae sae/ --data val.bin --db runs.db\n",
    .run = cmd_sae_eval,
};

CLI_PRINT(train_sae)

static int cmd_train_sae(int argc, char **argv)
{
    hs_train_sae_opts to = { .aux_k = 512, .steps = 1000, .lr = 1e-3, .seed = 1 };
    long dead = 10000000;
    cli_study s = { &hs_train_sae_kind, &to, { .batch = 4, .need_batch = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_train_sae,
                    .layers = train_sae_layers };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        { "--hook", OPT_STR, &to.hook, 0, "NAME", "TransformerLens hook: blocks.L.attn.hook_z, hook_resid_pre, hook_resid_post, hook_attn_out, hook_mlp_out", 0 },
        { "--out", OPT_STR, &to.out, 0, "DIR", "where the SAE is written (cfg.json, sae_weights.safetensors)", 0 },
        { "--force", OPT_FLAG, &to.force, 0, NULL, "replace the files of an existing --out", 0 },
        { "--d-sae", OPT_INT, &to.d_sae, 1, "M", "latents", 0 },
        { "--k", OPT_INT, &to.k, 1, "K", "latents active a token (TopK)", 0 },
        { "--aux-k", OPT_INT, &to.aux_k, 0, "A", "dead latents AuxK reconstructs the residual from (default 512)", 0 },
        { "--dead-tokens", OPT_LONG, &dead, 1, "N", "tokens without firing after which a latent is dead (default 10000000)", 0 },
        { "--steps", OPT_LONG, &to.steps, 1, "S", "steps of --batch x --seq-len tokens (default 1000)", 0 },
        { "--lr", OPT_DOUBLE, &to.lr, 0, "LR", "Adam's learning rate (default 1e-3)", 0 },
        { "--buffer", OPT_LONG, &to.buffer, 1, "N", "tokens of the shuffled activation buffer (default 16 steps' worth)", 0 },
        { "--b-dec-init", OPT_STR, &to.b_dec_init, 0, "median|mean", "b_dec from the first batch's geometric median (default) or mean", 0 },
        { "--seed", OPT_LONG, &to.seed, 0, "S", "seed of the weights and of the shuffling", 0 },
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    to.dead_tokens = dead;
    rc = rc ? (rc < 0 ? 0 : rc) : cli_study_go(&s, o, CLI_N(o), argc, argv);
    hs_sae_free(&to.sae);
    return rc;
}

HS_COMMAND(cmd_train_sae_record) = {
    .name = "train-sae",
    .flags = CMD_SHARDS,
    .order = 153,
    .summary = "Train a TopK SAE (Gao et al.) on a hook's activations, written in SAELens's format.",
    .usage = "headscope train-sae --model DIR --hook NAME (--data FILE | --text FILE) --out DIR --d-sae M --k K --db FILE [options]",
    .details =
        "Activations stream from forwards over the data (wrapping) through a shuffled\n"
        "buffer of --buffer tokens; each step takes --batch x --seq-len of them. z =\n"
        "TopK(relu(W_enc (x - b_dec) + b_enc)), x_hat = z W_dec + b_dec; the loss is the\n"
        "mean over tokens of ||x_hat - x||^2 plus 1/32 of AuxK's (the residual from the\n"
        "--aux-k largest pre-activations of the latents dead for --dead-tokens tokens);\n"
        "decoder rows kept at unit norm (their gradient's parallel part removed, then\n"
        "renormalised); Adam (0.9, 0.999); W_enc starts as W_dec's transpose, b_dec at the\n"
        "first batch's geometric median. The curve train_loss goes to the index;\n"
        "sae-eval and SAELens read the directory written.\n\n"
        "example: headscope train-sae --model runs/tiny --hook blocks.1.attn.hook_z --data\n"
        "         train.bin --seq-len 64 --batch 16 --d-sae 2048 --k 16 --steps 2000\n"
        "         --out sae/ --db runs.db\n",
    .run = cmd_train_sae,
};
