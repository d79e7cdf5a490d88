% Fraud patterns over the transfers example (examples/transfers.txt).
% Relations are directed; vertex ids here are account and device names (strings).

% Money moving in a ring of three accounts; a < b, a < c keeps one rotation of each ring.
ring3(a, b, c) := transfer(a, b), transfer(b, c), transfer(c, a), a < b, a < c.

% A flagged account that pays an account which pays it back.
flagged_roundtrip(a, b) := flagged(a), transfer(a, b), transfer(b, a).

% Two accounts that share a device and transfer money between them.
shared_device(a, b, d) := uses_device(a, d), uses_device(b, d), transfer(a, b), distinct.
