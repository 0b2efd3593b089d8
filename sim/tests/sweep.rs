//! A slice of the robustness sweep (`make sweep` runs 200 seeds of nine scenarios): 10 seeds
//! of two scenarios, the default algorithm against the peers' parity configurations.

use surgeguard_sim::closed_loop::scenarios::{self, Named};
use surgeguard_sim::sweep::{algorithms, sweep, DEFAULT};

#[test]
fn the_default_holds_its_own_on_a_slice_of_the_sweep() {
    let which: Vec<Named> = scenarios::ALL
        .iter()
        .copied()
        .filter(|(n, _)| ["overload", "heavy-tail"].contains(n))
        .collect();
    let algos: Vec<_> = algorithms().into_iter().filter(|a| a.peer || a.name == DEFAULT).collect();
    let r = sweep(&which, &algos, 10, 2);
    let d = r.default_index().expect("the default is swept");
    for (s, name) in r.scenarios.iter().enumerate() {
        let worst = r.cells[s][d].goodput().0;
        let best = r.best_peer_median(s);
        // The default's worst seed within 3 points of the best peer's median.
        assert!(worst >= best - 3.0, "{name}: worst {worst:.1} vs best peer median {best:.1}");
        // No seed sits at its floor while the dependency idles.
        assert_eq!(r.cells[s][d].stuck_seeds(), 0, "{name}");
    }
}
