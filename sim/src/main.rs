fn main() {
    let sc = surgeguard_sim::scenario::busy_but_useless();
    for p in &sc.protections {
        let prot = surgeguard_sim::Protection::parse(p).unwrap();
        let t = std::time::Instant::now();
        let r = surgeguard_sim::run(&sc, &prot);
        println!("{p}: {:?} events={} {:?}", r.summary, r.events, t.elapsed());
    }
}
