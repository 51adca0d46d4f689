#!/usr/bin/env python3
"""Windows of the airline-passengers series for models/airline_rnn.net.

    python3 scripts/airline_windows.py [--data DIR] [--predictions FILE]

The series (DIR/airline-passengers.csv, default DIR data/: 144 monthly
totals in thousands, 1949-01 to 1960-12) grows, and its seasonal swing
grows with it, so the test years hold more passengers than any training
year: a model of the levels would have to extrapolate.  Its month-on-month
changes in log, log(p_t / p_{t-1}), repeat from year to year instead.  So
each row is the 12 changes before a month and then that month's change,
all divided by the standard deviation of the training months' changes
(no shift: 0 still means "no change").  The first 96 months (1949-1956,
two thirds) are the training months: DIR/airline_train.csv predicts months
14..96 (83 rows), DIR/airline_test.csv months 97..144 (48 rows), their
inputs reaching back into 1956 as a forecast made each month from what was
known then would.  A header line names the columns.

It prints the test RMSE, in thousands of passengers, of the naive forecast
"the same as last month" (a change of 0) and of the seasonal one "last
month times the change a year before".  With --predictions (the program's
--predict output for DIR/airline_test.csv), it prints the model's: p_t =
p_{t-1} exp(predicted change).  Python's standard library only.
"""
import argparse
import csv
import math
import os

WINDOW = 12          # changes in, one change out
TRAIN_MONTHS = 96


def rmse(pred, months, series):
    return math.sqrt(sum((p - series[t]) ** 2 for p, t in zip(pred, months)) / len(months))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data")
    ap.add_argument("--predictions")
    a = ap.parse_args()
    with open(os.path.join(a.data, "airline-passengers.csv"), newline="") as f:
        series = [float(r[1]) for r in list(csv.reader(f))[1:]]
    assert len(series) == 144, f"{len(series)} months, expected 144"
    change = [None] + [math.log(series[t] / series[t - 1]) for t in range(1, len(series))]
    train = change[1:TRAIN_MONTHS]
    mean = sum(train) / len(train)
    std = math.sqrt(sum((v - mean) ** 2 for v in train) / len(train))

    header = ",".join([f"t-{WINDOW - k}" for k in range(WINDOW)] + ["t"])
    parts = {"train": range(WINDOW + 1, TRAIN_MONTHS), "test": range(TRAIN_MONTHS, len(series))}
    for part, months in parts.items():
        with open(os.path.join(a.data, f"airline_{part}.csv"), "w") as f:
            f.write(header + "\n")
            for t in months:
                f.write(",".join(f"{v / std:.6f}" for v in change[t - WINDOW:t + 1]) + "\n")
    test = parts["test"]
    print(f"changes divided by {std:.6f}, the training months' standard deviation")
    print(f"{len(parts['train'])} training rows, {len(test)} test rows")
    print(f"naive 'same as last month': test RMSE "
          f"{rmse([series[t - 1] for t in test], test, series):.2f} thousand passengers")
    print(f"seasonal naive 'last month times the change a year before': test RMSE "
          f"{rmse([series[t - 1] * math.exp(change[t - 12]) for t in test], test, series):.2f}")
    if a.predictions:
        with open(a.predictions) as f:
            z = [float(r["value_0"]) for r in csv.DictReader(f)]
        assert len(z) == len(test), f"{len(z)} predictions for {len(test)} test months"
        pred = [series[t - 1] * math.exp(v * std) for v, t in zip(z, test)]
        print(f"model: test RMSE {rmse(pred, test, series):.2f} thousand passengers")


if __name__ == "__main__":
    main()
