"""Fault: multiprocessing with the "spawn" start method (fresh interpreters), no torch; a child fails."""
import multiprocessing
import sys


def square(x):
    if x == 3:
        raise ValueError("fault: a pool task failed")
    return x * x


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    with multiprocessing.Pool(2) as pool:
        print(pool.map(square, [1, 2]), flush=True)
        try:
            pool.apply(square, (3,))
        except ValueError as exc:
            print("caught", exc, flush=True)
    process = multiprocessing.Process(target=square, args=(3,))  # raises in the child: exit 1
    process.start()
    process.join()
    sys.exit(process.exitcode)
