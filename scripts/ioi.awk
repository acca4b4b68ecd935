# An indirect-object task in byte-level text, for scripts/demo's causal study.
#
#   awk -v mode=text -v seed=S -v count=N -f scripts/ioi.awk      N training lines
#   awk -v mode=prompts -v seed=S -v count=N -f scripts/ioi.awk   N prompt pairs (JSONL)
#
# A line is "When A and B met, B gave it to A\n": two names (single capital
# letters), a verb, the subject repeated, and the indirect object, the name said
# once. Every line has 33 bytes, so sequences of 99 tokens start at a line.
# A prompt (SPEC §11) is a line up to "to " as token ids (bytes): the answer is
# the indirect object, the wrong token the subject; the corrupt prompt names a
# third person as the second subject, which leaves nothing to tell the two
# first names apart.
function pick(a, n) { return a[int(rand() * n) + 1] }
function ids(s,   i, out) {
    out = ""
    for (i = 1; i <= length(s); i++)
        out = out (i > 1 ? "," : "") ord[substr(s, i, 1)]
    return out
}
BEGIN {
    srand(seed)
    for (i = 32; i < 127; i++)
        ord[sprintf("%c", i)] = i
    n = split("A B C D E F G H J K L M N P R S T W", name, " ")
    split("met ate sat", verb, " ")
    split("gave lent sent", object, " ")
    for (k = 0; k < count; k++) {
        a = pick(name, n)
        do b = pick(name, n); while (b == a)
        do c = pick(name, n); while (c == a || c == b)
        s = rand() < 0.5 ? a : b
        io = s == a ? b : a
        head = sprintf("When %s and %s %s, ", a, b, pick(verb, 3))
        tail = sprintf(" %s it to ", pick(object, 3))
        if (mode == "text")
            printf "%s%s%s%s\n", head, s, tail, io
        else
            printf "{\"clean_ids\": [%s], \"corrupt_ids\": [%s], \"answer_id\": %d, \"wrong_id\": %d}\n",
                   ids(head s tail), ids(head c tail), ord[io], ord[s]
    }
}
