"""opsim/asc/sync.py: flags, barriers and the cross-core SyncAll."""
import numpy as np

import opsim.asc as asc


@asc.jit
def hand_over_through_gm(z: asc.GlobalAddress):
    """Block 0 computes a while, then stores; after sync_all block 1 loads what block 0 stored."""
    zg = asc.GlobalTensor()
    zg.set_global_buffer(z)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, 4096)
    if asc.get_block_idx() == 0:
        asc.duplicate(a, 3.0, 4096)
        for _ in range(20):                            # keeps block 0 busy past block 1's load
            asc.exp(a[1024:], a[1024:], 3072)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg, a, 64)
    asc.sync_all()
    if asc.get_block_idx() == 1:
        asc.data_copy(a, zg, 64)
        asc.set_flag(asc.HardEvent.MTE2_MTE3, 0)
        asc.wait_flag(asc.HardEvent.MTE2_MTE3, 0)
        asc.data_copy(zg[64:], a, 64)


def test_sync_all_orders_every_pipe_not_only_the_store_pipe():
    # sync_all used to set and wait its cross-core flag on MTE3 only: block 1's load (MTE2)
    # after it ran before block 0's store, read zeros, and the sanitizer called it a race
    z = np.zeros(128, np.float32)
    res = hand_over_through_gm[2, None](z, sanitize=True)
    assert np.all(z == 3.0)
    assert res.sanitizer.ok, res.sanitizer


@asc.jit
def sync_every_block(z: asc.GlobalAddress):
    asc.sync_all()


def test_sync_all_with_more_blocks_than_cores_is_refused_not_a_deadlock():
    # 48 vector cores on atlas-a2: blocks 48.. wait for a free core, the first 48 wait for them
    # in sync_all; this used to end in a DeadlockError listing 48 blocked MTE3 pipes
    import pytest
    from opsim.simulator.errors import DeadlockError, SimulatorError

    with pytest.raises(SimulatorError, match=r"sync_all in a launch of block_dim 60 on 48 cores.*"
                                             r"block_dim must be <= 48 \(at .*test_sync.py:\d+\)") as err:
        sync_every_block[60, None](np.zeros(8, np.float32))
    assert not isinstance(err.value, DeadlockError)
    sync_every_block[48, None](np.zeros(8, np.float32))
    masked = asc.jit(core_mask=0xF)(sync_every_block.fn)          # four cores allowed
    masked[4, None](np.zeros(8, np.float32))
    with pytest.raises(SimulatorError, match="block_dim 5 on 4 cores"):
        masked[5, None](np.zeros(8, np.float32))
