/* circuit: edge attribution patching (EAP, EAP-IG) of every edge and the
 * faithfulness of top-N circuits (SPEC §15) into the index. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "study.h"
#include "study_atp.h"

static void print_circuit(FILE *f, const hs_summary *s, const void *res, const void *o)
{
    (void)o;
    const hs_circuit_study_result *r = res;
    hs_print_circuit(f, s, &r->circuit, r->order);
}

static int cmd_circuit(int argc, char **argv)
{
    hs_circuit_study_opts co = { .circuit = { .ig_steps = 5 } };
    /* the run records its positions' tokens */
    cli_study s = { &hs_circuit_kind, &co, { .keep_tokenizer = 1 },
                    .flags = CLI_OWN_NEEDS | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_circuit };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_PROMPTS(s),
        OPT_DB(&s.db),
        { "--method", OPT_STR, &co.method, 0, "eap|eap-ig", "edge attribution patching, or with integrated gradients", 0 },
        { "--ig-steps", OPT_INT, &co.circuit.ig_steps, 1, "m", "eap-ig's interpolation steps (default 5)", 0 },
        { "--top-n", OPT_STR, &co.top, 0, "N,...", "the circuits whose faithfulness is measured (default 0,1,2,5,10,.. and all edges)", 0 },
        OPT_PROMPT_TOKENIZER(&s.in.source.tokenizer),
        OPT_BATCH_AS(&s.in.batch, "prompts per forward (default: by memory, at most 16)"),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    CLI_EXIT_IF(rc);
    if (!s.in.model || !s.in.prompts || !s.db || !co.method)
        return cli_usage_error("circuit",
                               "--model DIR, --prompts FILE, --db FILE and --method are required");
    int method;
    if (hs_circuit_method(&method, co.method))
        return cli_usage_error("circuit", "%s", hs_last_error());
    return cli_study_go(&s, o, CLI_N(o), argc, argv);
}

HS_COMMAND(cmd_circuit_record) = {
    .name = "circuit",
    .flags = CMD_SHARDS,
    .order = 158,
    .summary = "Edge attribution patching (EAP, EAP-IG) of every edge and the faithfulness of top-N circuits.",
    .usage = "headscope circuit --model DIR --prompts FILE --db FILE --method eap|eap-ig [options]",
    .details = "The graph of EAP-IG (Hanna et al. 2024): nodes input, a{l}.h{h} (z_h W_o^h), m{l};\n"
        "receivers a{l}.h{h}<q>, <k>, <v> (k, v per key/value head; MLA: the latent, h0), m{l},\n"
        "logits, each reading the residual stream through its own input norm. Per edge u -> v:\n"
        "  eap    = mean over prompts of (a_u,corrupt - a_u,clean) . dLD/d(input of v), clean run\n"
        "  eap_ig = the same, the gradient averaged over m steps at embeddings\n"
        "           e_corrupt + (k/m)(e_clean - e_corrupt), k = 0..m-1\n"
        "with stderr over prompts, into edge_metrics. For each N of --top-n the top N edges by\n"
        "|score| (ties by sender, receiver) are run on the clean prompts, every other edge\n"
        "carrying its corrupt value: faithfulness = (mean LD_circuit - mean LD_corrupt) /\n"
        "(mean LD_clean - mean LD_corrupt), curve faithfulness (x = N). Refuses models whose\n"
        "residual stream is not a sum of the nodes' outputs (post-norm, output norms: gemma2,\n"
        "gemma3_text, olmo2). A gap within 2 stderr of 0 fails as patch's (SPEC §21). Shards\n"
        "prompts under mpirun. plot circuit draws the graph.\n\n"
        "example: headscope circuit --model runs/tiny --prompts ioi.jsonl --db runs.db --method eap-ig\n",
    .run = cmd_circuit,
};
