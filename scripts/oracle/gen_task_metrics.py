"""Oracle for analyze/task_metrics.c (SPEC §16's numbers), written apart from
it: every leave-one-out value recomputed from scratch on the n - 1 examples,
f1 and accuracy by counting, Matthews' coefficient as Gorodkin's
covariance of one-hot matrices (not the confusion-matrix formula the C code
uses), ranks by sorting. Pure Python floats (IEEE double).

usage: python3 gen_task_metrics.py > tests/fixtures/task_metrics.txt

Format (read by tests/test_task_metrics.c): per case
  case NAME KIND N K            KIND 0 single-label, 1 multi-label, 2 regression
  out  N*K numbers   out2 N*K numbers (a second run: the paired deltas)
  label N ints | target N*K or N numbers
  loss N numbers                per-example losses of `out`
  metric NAME VALUE SE DELTA DSE   (DELTA, DSE: out minus out2, paired)
"""
import math
import random

rnd = random.Random(20261206)


def argmax(row):
    best = 0
    for j in range(1, len(row)):
        if row[j] > row[best]:
            best = j
    return best


def accuracy(kind, out, lab):
    if kind == 0:
        return sum(argmax(o) == y for o, y in zip(out, lab)) / len(out)
    return sum(all((x > 0) == (t > 0.5) for x, t in zip(o, y)) for o, y in zip(out, lab)) / len(out)


def f1_counts(tp, fp, fn):
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0


def f1(kind, out, lab, k):
    if kind == 1:  # micro over every label
        tp = sum((x > 0) and t > 0.5 for o, y in zip(out, lab) for x, t in zip(o, y))
        fp = sum((x > 0) and t <= 0.5 for o, y in zip(out, lab) for x, t in zip(o, y))
        fn = sum((x <= 0) and t > 0.5 for o, y in zip(out, lab) for x, t in zip(o, y))
        return f1_counts(tp, fp, fn)
    pred = [argmax(o) for o in out]
    per = []
    for c in range(k):
        tp = sum(p == c and y == c for p, y in zip(pred, lab))
        fp = sum(p == c and y != c for p, y in zip(pred, lab))
        fn = sum(p != c and y == c for p, y in zip(pred, lab))
        per.append(f1_counts(tp, fp, fn))
    return per[1] if k == 2 else sum(per) / k


def mcc(out, lab, k):
    """Gorodkin (2004): cov(X, Y) / sqrt(cov(X, X) cov(Y, Y)) of one-hot rows."""
    pred = [argmax(o) for o in out]
    n = len(out)
    X = [[1.0 if p == c else 0.0 for c in range(k)] for p in pred]
    Y = [[1.0 if y == c else 0.0 for c in range(k)] for y in lab]
    def cov(A, B):
        s = 0.0
        for c in range(k):
            ma = sum(a[c] for a in A) / n
            mb = sum(b[c] for b in B) / n
            s += sum((a[c] - ma) * (b[c] - mb) for a, b in zip(A, B))
        return s
    d = cov(X, X) * cov(Y, Y)
    return cov(X, Y) / math.sqrt(d) if d > 0 else 0.0


def pearson(x, y):
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    vx = sum((a - mx) ** 2 for a in x)
    vy = sum((b - my) ** 2 for b in y)
    if vx <= 0 or vy <= 0:
        return float("nan")
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / math.sqrt(vx * vy)


def ranks(x):
    order = sorted(range(len(x)), key=lambda i: x[i])
    r = [0.0] * len(x)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for q in range(i, j + 1):
            r[order[q]] = (i + j) / 2 + 1
        i = j + 1
    return r


def metric(name, kind, out, lab, k):
    if name == "accuracy":
        return accuracy(kind, out, lab)
    if name == "f1":
        return f1(kind, out, lab, k)
    if name == "mcc":
        return mcc(out, lab, k)
    x = [o[0] for o in out]
    return pearson(x, lab) if name == "pearson" else pearson(ranks(x), ranks(lab))


def jackknife(vals):
    n = len(vals)
    m = sum(vals) / n
    return math.sqrt((n - 1) / n * sum((v - m) ** 2 for v in vals))


def loss(kind, o, y):
    if kind == 2:
        return (o[0] - y) ** 2
    if kind == 1:
        return sum(max(x, 0) - x * t + math.log1p(math.exp(-abs(x))) for x, t in zip(o, y)) / len(o)
    m = max(o)
    return m + math.log(sum(math.exp(x - m) for x in o)) - o[y]


def case(name, kind, n, k, metrics, out, out2, lab):
    print("case", name, kind, n, k)
    print("out", " ".join(repr(x) for o in out for x in o))
    print("out2", " ".join(repr(x) for o in out2 for x in o))
    if kind == 0:
        print("label", " ".join(str(y) for y in lab))
    elif kind == 1:
        print("target", " ".join(repr(float(t)) for y in lab for t in y))
    else:
        print("target", " ".join(repr(y) for y in lab))
    print("loss", " ".join(repr(loss(kind, o, y)) for o, y in zip(out, lab)))
    for m in metrics:
        v = metric(m, kind, out, lab, k)
        loo = [metric(m, kind, out[:i] + out[i + 1:], lab[:i] + lab[i + 1:], k) for i in range(n)]
        loo2 = [metric(m, kind, out2[:i] + out2[i + 1:], lab[:i] + lab[i + 1:], k)
                for i in range(n)]
        d = v - metric(m, kind, out2, lab, k)
        print("metric", m, repr(v), repr(jackknife(loo)), repr(d),
              repr(jackknife([a - b for a, b in zip(loo, loo2)])))


def logits(n, k, lab, skill):
    return [[rnd.gauss(0, 1) + (skill if j == y else 0) for j in range(k)] for y in lab]


def main():
    for n, k, skill, name in ((23, 2, 1.0, "binary"), (31, 3, 0.8, "three"), (12, 4, 0.3, "sparse4"),
                              (5, 2, 9.0, "perfect")):
        lab = [rnd.randrange(k) for _ in range(n)]
        if name == "sparse4":
            lab = [rnd.choice((0, 1, 3)) for _ in range(n)]  # class 2 never true
        case(name, 0, n, k, ["accuracy", "f1", "mcc"], logits(n, k, lab, skill),
             logits(n, k, lab, skill / 2), lab)
    n, k = 17, 4
    tgt = [[rnd.randrange(2) for _ in range(k)] for _ in range(n)]
    case("multilabel", 1, n, k, ["accuracy", "f1"],
         [[rnd.gauss(0, 1) + (1.5 if t else -1.5) for t in y] for y in tgt],
         [[rnd.gauss(0, 1) for t in y] for y in tgt], tgt)
    n = 19
    y = [float(rnd.randrange(6)) / 2 for _ in range(n)]  # ties in the targets
    x = [[round(v + rnd.gauss(0, 0.7), 1)] for v in y]  # and in the outputs
    x2 = [[round(rnd.gauss(0, 1), 1)] for v in y]
    case("regression", 2, n, 1, ["pearson", "spearman"], x, x2, y)


if __name__ == "__main__":
    main()
