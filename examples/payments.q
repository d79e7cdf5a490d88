% Event-time fraud patterns over the payments example (examples/payments.jsonl): transfers are
% events with an id, an amount, a channel and a time (ts); old transfers leave the window.

% A ring of three transfers of 1,000 or more, each after the previous one, all within 24 hours.
layering_ring(a, b, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
    t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
    t1.ts < t2.ts, t2.ts < t3.ts,
    within 24h,
    distinct.

% Money in and straight out: a transfer out of b within 10 minutes of one into b, of at least
% 90% of it.
pass_through(a, b, c) :=
    transfer(a, b) as t1, transfer(b, c) as t2,
    t1.ts <= t2.ts, t2.ts <= t1.ts + 10m,
    t2.amount >= 0.9 * t1.amount,
    distinct.
