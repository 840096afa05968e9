"""The example studies' pictures are readable: short tick labels, no label over another, every
text inside the picture, units on the value axis."""
from __future__ import annotations

from pathlib import Path

import pytest

from opsim.study_labels import axis_labels, cell_text, value_label
from opsim.sweep import sweep

pytest.importorskip("matplotlib")

STUDIES = Path(__file__).resolve().parents[2] / "examples" / "studies"


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _drawn_ticklabels(axis) -> list:
    """The tick labels matplotlib draws: those of ticks inside the axis's view (it keeps labels of
    ticks beyond it, not drawn)."""
    lo, hi = sorted(axis.get_view_interval())
    return [tick.label1 for tick in axis.get_major_ticks()
            if tick.label1.get_visible() and tick.label1.get_text().strip()
            and lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo)]


def assert_readable(fig) -> None:
    """No two tick labels of one axis overlap; every text drawn lies inside the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    ticks, texts = [], []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks.append(_drawn_ticklabels(axis))
            texts += ticks[-1] + [axis.label]
        texts += [ax.title] + [t for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += list(legend.get_texts()) + [legend.get_title()]
    for t in texts:
        if not (t.get_visible() and t.get_text().strip()):
            continue
        box = t.get_window_extent(renderer)
        assert (box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1 and box.y0 >= frame.y0 - 1
                and box.y1 <= frame.y1 + 1), f"text {t.get_text()!r} leaves the picture"
    for labels in ticks:
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not _overlap(boxes[i], boxes[j]), \
                    f"tick labels {labels[i].get_text()!r} and {labels[j].get_text()!r} overlap"


def test_table_valued_axes_get_short_tick_labels_and_byte_axes_units():
    shapes = ['{"grad": [4096, 1024], "indices": [4096]}', '{"grad": [4096, 4894], "indices": [4096]}']
    lab = axis_labels("shape", shapes)
    assert lab.ticks == ("grad 4096x1024", "grad 4096x4894")     # only what differs
    assert lab.detail == "indices 4096 in every point"
    ub = axis_labels("override.kernels.embedding_dense_backward.ub_budget", [131072, 196608, 262144])
    assert ub.ticks == ("128 KiB", "192 KiB", "256 KiB") and ub.title == "ub_budget (bytes)"
    assert "kernels.embedding_dense_backward.ub_budget" in ub.detail
    assert axis_labels("attr.core_mask", [1, 15]).ticks == ("0x1\n1 core", "0xf\n4 cores")
    assert axis_labels("tiling.block_dim", [1, 48]).ticks == ("1", "48")
    assert value_label("time_us") == "time (µs)"
    assert [cell_text(v) for v in (1213.16, 31.04, 0.5, 123456.0)] == ["1213", "31", "0.5", "1.2e+05"]


# the example studies that draw pictures (flce_vocab_capacity has no [[plot]] and no numeric axis)
PLOTTED = ["dsp_core_mask_scaling.toml", "elementwise_tiling_a2_a3.toml", "embedding_capacity_ub.toml"]


def _pictures(study: str, tmp_path) -> list:
    """(file, drawn x tick labels) of each picture plot_study draws for ``study``, each checked
    with assert_readable before it is closed."""
    import matplotlib.pyplot as plt
    from opsim import study_plots

    res = sweep(STUDIES / study, tmp_path / "s.sqlite", workers=1, quiet=True)
    made = []
    real_close = plt.close

    def keep(fig=None):
        assert_readable(fig)
        made.append([t.get_text() for t in _drawn_ticklabels(fig.axes[0].xaxis)])
        real_close(fig)
    plt.close = keep
    try:
        written = study_plots.plot_study(res, tmp_path / "plots")
    finally:
        plt.close = real_close
    assert len(made) == len(written) > 0
    return list(zip(written, made))


@pytest.mark.parametrize("study", PLOTTED)
def test_every_example_study_picture_is_readable(study, tmp_path):
    # the embedding heat map printed its operand tables as tick labels, wider than the picture
    _pictures(study, tmp_path)


def test_the_core_mask_lines_are_ticked_at_the_masks_the_study_ran(tmp_path):
    # a log2 axis ticked 2^0 .. 2^8 between masks 1, 3, 15, 63, 255 (which are not core counts)
    [(_, ticks)] = _pictures("dsp_core_mask_scaling.toml", tmp_path)
    assert ticks == ["0x1\n1 core", "0x3\n2 cores", "0xf\n4 cores", "0x3f\n6 cores", "0xff\n8 cores"]


def test_a_cell_of_another_value_than_time_shows_that_value_at_the_fastest_point():
    # every value was reduced to its smallest over the other axes: a bandwidth cell showed the
    # slowest tiling's bandwidth under "best over the other axes"
    from opsim.study_plots import heatmap_figure
    import matplotlib.pyplot as plt
    rows = [{"status": "ok", "axis:x": 1, "axis:y": 1, "axis:tile": t, "time_us": us, "bandwidth_GBps": bw}
            for t, us, bw in ((1024, 1.0, 50.0), (2048, 2.0, 10.0))]
    for value, want in (("bandwidth_GBps", 50.0), ("time_us", 1.0)):
        fig = heatmap_figure(rows, "x", "y", value)
        try:
            assert float(fig.axes[0].images[0].get_array()[0, 0]) == want, value
        finally:
            plt.close(fig)
