//! Transfers: a value read on another instance (or whole where it is split) goes through a
//! transfer op; the dataflow pass asks for one at each such read, so ids follow the text.

use super::*;

impl<'a> Lowerer<'a> {
    /// Places a floating producer (`sample`) on its first consumer's instance.
    pub(super) fn settle(&mut self, producer: u32, inst: usize) {
        if !self.floating.remove(&producer) {
            return;
        }
        let op = &mut self.ops[producer as usize];
        op.instance = Some(self.instances[inst].id.clone());
        op.ranks = self.instances[inst].ranks.clone();
        for &v in &op.outputs.clone() {
            let value = &mut self.values[v as usize];
            value.at = self.instances[inst].id.clone();
            if let Split::Rows { rows, .. } = value.split {
                value.split = Split::Rows {
                    parts: self.instances[inst].layout.data_ranks(),
                    rows,
                };
            }
        }
    }

    pub(super) fn instance_index(&self, id: &str) -> usize {
        self.instances
            .iter()
            .position(|i| i.id == id)
            .expect("an instance of the plan")
    }

    /// Makes value `v` available to `inst` (on `ranks`); returns the transfer (if one is needed)
    /// and the split the consumer sees.
    pub(super) fn bring(
        &mut self,
        v: u32,
        inst: usize,
        whole: bool,
        ranks: &RankSet,
    ) -> (Option<u32>, Split) {
        let value = self.values[v as usize].clone();
        let src = self.instance_index(&value.at);
        let dst_split = if whole || value.split == Split::Replicated {
            Split::Replicated
        } else {
            let rows = match value.split {
                Split::Rows { rows, .. } => rows,
                Split::Replicated => None,
            };
            Split::Rows {
                parts: self.instances[inst].layout.data_ranks(),
                rows,
            }
        };
        if let Some(&t) = self.transfers.get(&(v, inst)) {
            return (t, dst_split);
        }
        let transfer = self.make_transfer(&value, src, inst, whole, ranks);
        let id = transfer.map(|(collective, sends)| {
            let from = self.instances[src].id.clone();
            let to = self.instances[inst].id.clone();
            let total = value_bytes(&value.ty);
            let bytes = total.map(|t| {
                sends
                    .iter()
                    .map(|s| {
                        t * (s.rows.end - s.rows.start) / s.rows.of.max(1) * u64::from(s.to.len())
                    })
                    .sum()
            });
            let mut all = RankSet::from_ranks(sends.iter().map(|s| s.from));
            for s in &sends {
                all = all.union(&s.to);
            }
            let kind = OpKind::Transfer {
                collective,
                value: v,
                from: from.clone(),
                to: to.clone(),
                bytes,
                sends,
            };
            let label = format!("transfer {} {from}→{to}", value.name);
            let producer = value.producer.unwrap_or_default();
            let tid = self.ops.len() as u32;
            self.edges.push(Edge {
                value: v,
                field: None,
                from: producer,
                to: tid,
                ty: value.ty.clone(),
                split: value.split.clone(),
                via: None,
            });
            self.ops.push(Op {
                id: tid,
                label,
                kind,
                instance: None,
                ranks: all,
                uses: Vec::new(),
                inputs: vec![Input {
                    name: value.name.clone(),
                    value: v,
                    field: None,
                }],
                outputs: Vec::new(),
                deps: vec![producer],
                level: 0,
                every: self.every,
            });
            tid
        });
        if !whole {
            self.transfers.insert((v, inst), id);
        }
        (id, dst_split)
    }

    pub(super) fn make_transfer(
        &self,
        value: &Value,
        src: usize,
        dst: usize,
        whole: bool,
        ranks: &RankSet,
    ) -> Option<(Collective, Vec<Send>)> {
        let s = &self.instances[src];
        let d = &self.instances[dst];
        match &value.split {
            Split::Replicated => {
                let missing: Vec<u32> = ranks.iter().filter(|r| !s.ranks.contains(*r)).collect();
                if missing.is_empty() {
                    return None;
                }
                let from = s.ranks.nth(0)?;
                Some((
                    Collective::Broadcast,
                    vec![Send {
                        from,
                        to: RankSet::from_ranks(missing),
                        rows: Slice {
                            start: 0,
                            end: 1,
                            of: 1,
                        },
                    }],
                ))
            }
            Split::Rows { parts, rows } => {
                let ds = *parts;
                if whole {
                    let mut sends = Vec::new();
                    let of = rows.unwrap_or(u64::from(ds));
                    for i in 0..ds {
                        let (a, b) = block(of, ds, i);
                        let from = s.data_leader(i)?;
                        let to = RankSet::from_ranks(
                            ranks.iter().filter(|r| !s.data_group(i).contains(*r)),
                        );
                        if !to.is_empty() && a < b {
                            sends.push(Send {
                                from,
                                to,
                                rows: Slice {
                                    start: a,
                                    end: b,
                                    of,
                                },
                            });
                        }
                    }
                    return (!sends.is_empty()).then_some((Collective::Gather, sends));
                }
                let dd = d.layout.data_ranks();
                let same = ds == dd && (0..ds).all(|i| s.data_group(i) == d.data_group(i));
                if same {
                    return None;
                }
                let of = rows.unwrap_or_else(|| lcm(u64::from(ds), u64::from(dd)));
                let mut sends = Vec::new();
                for j in 0..dd {
                    let (ja, jb) = block(of, dd, j);
                    let group = d.data_group(j);
                    for i in 0..ds {
                        let (ia, ib) = block(of, ds, i);
                        let (a, b) = (ja.max(ia), jb.min(ib));
                        if a >= b {
                            continue;
                        }
                        let holders = s.data_group(i);
                        let to =
                            RankSet::from_ranks(group.iter().filter(|r| !holders.contains(*r)));
                        if to.is_empty() {
                            continue;
                        }
                        sends.push(Send {
                            from: s.data_leader(i)?,
                            to,
                            rows: Slice {
                                start: a,
                                end: b,
                                of,
                            },
                        });
                    }
                }
                if sends.is_empty() {
                    return None;
                }
                let collective = if ds == 1 && dd > 1 {
                    Collective::Scatter
                } else if ds > 1 && dd == 1 {
                    Collective::Gather
                } else if !s.ranks.intersects(&d.ranks) {
                    Collective::P2p
                } else {
                    Collective::AllToAll
                };
                Some((collective, sends))
            }
        }
    }
}
