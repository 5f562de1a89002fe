import os

os.environ.setdefault("PGLAB_NO_PROGRESS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

# One intra-op thread: the suite's tensors are tiny, and with two threads on a busy 2-core
# machine small ops were measured ~20x slower (thread wake-ups). Tests that need another
# count set it themselves; the fixture below restores one thread after each test.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    matmul_precision = torch.get_float32_matmul_precision()
    validate_args = torch.distributions.Distribution._validate_args
    yield
    # Libraries may set process-wide torch state: RL4COTrainer sets the float32 matmul
    # precision to "medium", which on CPUs with AMX/AVX512-BF16 runs float32 matmuls in
    # bfloat16 (seen: 0.5% log-prob differences in a later test). Restore it so that no
    # test changes another's numbers.
    torch.set_float32_matmul_precision(matmul_precision)
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(validate_args)
