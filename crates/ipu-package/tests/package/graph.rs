//! Graph validation on graphs built by hand: topology, repeats, and the
//! broadcast rule, including known-bad graphs the validator must reject.

use ipu_layout::{EntityId, Fp8Format, Precision};
use ipu_package::graph::{
    Activation, Carry, ErrorLocation, GraphBuilder, GraphError, Op, OpId, Repeat, Slot,
    SoftmaxPrecision, TensorId, TensorKind, broadcast_shapes,
};
use proptest::prelude::*;

const F16: Precision = Precision::F16;
const FP8: Precision = Precision::F8 {
    format: Fp8Format::F143,
    scale: -4,
};

/// x → (gelu) → y with a chain of `layers` iterations recorded as a repeat.
fn chain(layers: u32, tamper: impl FnOnce(&mut Vec<Op>)) -> Result<ipu_package::Graph, GraphError> {
    let mut b = GraphBuilder::new("chain");
    let x = b.tensor("x0", [2, 4], F16, TensorKind::Input);
    let first_tensor = b.next_tensor();
    let mut ops = Vec::new();
    let mut prev = x;
    for i in 0..layers {
        let kind = if i + 1 == layers {
            TensorKind::Output
        } else {
            TensorKind::Activation
        };
        let w = b.tensor(format!("w{i}"), [4, 4], FP8, TensorKind::Weight);
        let c = b.tensor(format!("c{i}"), [2, 4], FP8, TensorKind::Activation);
        let y = b.tensor(format!("x{}", i + 1), [2, 4], F16, kind);
        ops.push(Op::CastFp8 {
            input: prev,
            output: c,
        });
        ops.push(Op::Gemm {
            left: c,
            right: w,
            bias: None,
            output: y,
        });
        prev = y;
    }
    tamper(&mut ops);
    for op in ops {
        b.op(op);
    }
    let carry = Carry {
        initial: x,
        body_tensor: 2,
    };
    b.repeat(
        Repeat::new("layers", layers, OpId::from_u32(0), 2, first_tensor, 3)
            .with_carries(vec![carry]),
    );
    b.finish()
}

#[test]
fn a_well_formed_repeat_validates() {
    let graph = chain(4, |_| {}).expect("valid");
    let repeat = &graph.repeats()[0];
    assert_eq!(repeat.iteration_ops(3), 6..8);
    assert_eq!(repeat.iteration_tensors(1), 4..7);
    assert_eq!(repeat.locate_tensor(TensorId::from_u32(5)), Some((1, 1)));
    assert_eq!(repeat.locate_tensor(TensorId::from_u32(0)), None);
    assert_eq!(
        graph.producer(TensorId::from_u32(3)),
        Some(OpId::from_u32(1))
    );
    assert_eq!(graph.producer(TensorId::from_u32(0)), None);
}

#[test]
fn an_iteration_that_differs_is_rejected() {
    // Iteration 2 reads iteration 0's output instead of iteration 1's.
    let err = chain(4, |ops| {
        ops[4] = Op::CastFp8 {
            input: TensorId::from_u32(3),
            output: TensorId::from_u32(8),
        }
    })
    .expect_err("broken chain");
    match &err {
        GraphError::Repeat { iteration, op, .. } => {
            assert_eq!(*iteration, 2);
            assert_eq!(*op, Some(OpId::from_u32(4)));
        }
        other => panic!("{other:?}"),
    }
    // Iteration 1 uses another op kind.
    let err = chain(3, |ops| {
        ops[2] = Op::Activation {
            function: Activation::GeluTanh,
            input: TensorId::from_u32(3),
            output: TensorId::from_u32(5),
        }
    });
    assert!(err.is_err());
}

#[test]
fn an_undeclared_carry_is_rejected() {
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x0", [4], F16, TensorKind::Input);
    let y1 = b.tensor("x1", [4], F16, TensorKind::Activation);
    let y2 = b.tensor("x2", [4], F16, TensorKind::Output);
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: x,
        output: y1,
    });
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: y1,
        output: y2,
    });
    let repeat = Repeat::new("r", 2, OpId::from_u32(0), 1, y1, 1);
    b.repeat(repeat.clone());
    let err = b.finish().expect_err("no carry declared");
    assert!(
        matches!(err, GraphError::Repeat { iteration: 1, .. }),
        "{err}"
    );
    // Declared, it validates; a carry from inside the repeat does not.
    let rebuild = |carry: Carry| {
        let mut b = GraphBuilder::new("g");
        let x = b.tensor("x0", [4], F16, TensorKind::Input);
        let y1 = b.tensor("x1", [4], F16, TensorKind::Activation);
        let y2 = b.tensor("x2", [4], F16, TensorKind::Output);
        b.op(Op::Activation {
            function: Activation::GeluTanh,
            input: x,
            output: y1,
        });
        b.op(Op::Activation {
            function: Activation::GeluTanh,
            input: y1,
            output: y2,
        });
        b.repeat(repeat.clone().with_carries(vec![carry]));
        b.finish()
    };
    let declared = rebuild(Carry {
        initial: x,
        body_tensor: 0,
    });
    assert!(declared.is_ok(), "{declared:?}");
    assert!(
        rebuild(Carry {
            initial: y1,
            body_tensor: 0
        })
        .is_err()
    );
    assert!(
        rebuild(Carry {
            initial: x,
            body_tensor: 1
        })
        .is_err()
    );
}

#[test]
fn a_later_iteration_with_another_tensor_type_is_rejected() {
    // Three gelu iterations; the last one writes F32 instead of F16.
    let mut b = GraphBuilder::new("g");
    let mut prev = b.tensor("x0", [4], F16, TensorKind::Input);
    let first = b.next_tensor();
    for i in 1..=3 {
        let (p, kind) = if i == 3 {
            (Precision::F32, TensorKind::Output)
        } else {
            (F16, TensorKind::Activation)
        };
        let y = b.tensor(format!("x{i}"), [4], p, kind);
        b.op(Op::Activation {
            function: Activation::GeluTanh,
            input: prev,
            output: y,
        });
        prev = y;
    }
    let carry = Carry {
        initial: TensorId::from_u32(0),
        body_tensor: 0,
    };
    b.repeat(Repeat::new("r", 3, OpId::from_u32(0), 1, first, 1).with_carries(vec![carry]));
    let err = b.finish().expect_err("iteration 2 differs");
    assert!(
        matches!(err, GraphError::Repeat { iteration: 2, .. }),
        "{err}"
    );
}

#[test]
fn a_repeat_past_the_graph_is_rejected() {
    let mut b = GraphBuilder::new("short");
    let x = b.tensor("x", [4], F16, TensorKind::Input);
    let y = b.tensor("y", [4], F16, TensorKind::Output);
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: x,
        output: y,
    });
    b.repeat(Repeat::new(
        "r",
        3,
        OpId::from_u32(0),
        1,
        TensorId::from_u32(1),
        1,
    ));
    let err = b.finish().expect_err("repeat runs past the ops");
    assert!(matches!(err, GraphError::Repeat { .. }), "{err}");
}

#[test]
fn topology_errors_carry_their_ids() {
    // Reading an activation that nobody wrote yet.
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x", [4], F16, TensorKind::Input);
    let a = b.tensor("a", [4], F16, TensorKind::Activation);
    let y = b.tensor("y", [4], F16, TensorKind::Output);
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: a,
        output: y,
    });
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: x,
        output: a,
    });
    let err = b.finish().expect_err("out of order");
    assert_eq!(
        err.location(),
        ErrorLocation::Operand(OpId::from_u32(0), Slot::Input(0))
    );
    assert!(
        err.to_string().contains("op0") && err.to_string().contains("`a`"),
        "{err}"
    );

    // A dangling id.
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x", [4], F16, TensorKind::Input);
    let y = b.tensor("y", [4], F16, TensorKind::Output);
    b.op(Op::Add {
        left: x,
        right: TensorId::new(9),
        output: y,
    });
    assert!(matches!(
        b.finish(),
        Err(GraphError::DanglingTensor {
            slot: Slot::Input(1),
            ..
        })
    ));

    // No outputs.
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x", [4], F16, TensorKind::Input);
    let y = b.tensor("y", [4], F16, TensorKind::Activation);
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: x,
        output: y,
    });
    assert!(matches!(b.finish(), Err(GraphError::NoOutputs)));

    // Duplicate names.
    let mut b = GraphBuilder::new("g");
    let x = b.tensor("x", [4], F16, TensorKind::Input);
    let y = b.tensor("x", [4], F16, TensorKind::Output);
    b.op(Op::Activation {
        function: Activation::GeluTanh,
        input: x,
        output: y,
    });
    assert!(matches!(b.finish(), Err(GraphError::DuplicateName { .. })));
}

#[test]
fn op_rules() {
    let check = |make: &dyn Fn(&mut GraphBuilder) -> Op| {
        let mut b = GraphBuilder::new("g");
        let op = make(&mut b);
        b.op(op);
        b.finish()
    };
    // A transpose with a repeated axis.
    let err = check(&|b| {
        let x = b.tensor("x", [2, 3], F16, TensorKind::Input);
        let y = b.tensor("y", [3, 2], F16, TensorKind::Output);
        Op::Transpose {
            input: x,
            perm: vec![1, 1],
            output: y,
        }
    })
    .expect_err("bad perm");
    assert_eq!(
        err.location(),
        ErrorLocation::Attribute(OpId::from_u32(0), "perm")
    );
    // A reshape that changes the element count.
    assert!(
        check(&|b| {
            let x = b.tensor("x", [2, 3], F16, TensorKind::Input);
            let y = b.tensor("y", [7], F16, TensorKind::Output);
            Op::Reshape {
                input: x,
                output: y,
            }
        })
        .is_err()
    );
    // A reshape that changes the precision.
    assert!(matches!(
        check(&|b| {
            let x = b.tensor("x", [2, 3], F16, TensorKind::Input);
            let y = b.tensor("y", [6], Precision::F32, TensorKind::Output);
            Op::Reshape {
                input: x,
                output: y,
            }
        }),
        Err(GraphError::Precision { .. })
    ));
    // A GEMM writing FP8 directly.
    assert!(matches!(
        check(&|b| {
            let x = b.tensor("x", [2, 3], FP8, TensorKind::Input);
            let w = b.tensor("w", [3, 4], FP8, TensorKind::Weight);
            let y = b.tensor("y", [2, 4], FP8, TensorKind::Output);
            Op::Gemm {
                left: x,
                right: w,
                bias: None,
                output: y,
            }
        }),
        Err(GraphError::Precision {
            slot: Slot::Output,
            ..
        })
    ));
    // Attention with keys of another batch.
    assert!(matches!(
        check(&|b| {
            let q = b.tensor("q", [2, 3, 8], F16, TensorKind::Input);
            let k = b.tensor("k", [1, 5, 8], F16, TensorKind::Input);
            let v = b.tensor("v", [2, 5, 8], F16, TensorKind::Input);
            let y = b.tensor("y", [2, 3, 8], F16, TensorKind::Output);
            Op::Attention {
                q,
                k,
                v,
                heads: 2,
                softmax: SoftmaxPrecision::F16,
                mask: ipu_package::graph::AttentionMask::None,
                queries_scaled: false,
                output: y,
            }
        }),
        Err(GraphError::Shape {
            slot: Slot::Input(1),
            ..
        })
    ));
    // A causal mask over fewer queries than keys.
    assert!(matches!(
        check(&|b| {
            let q = b.tensor("q", [2, 3, 8], F16, TensorKind::Input);
            let k = b.tensor("k", [2, 5, 8], F16, TensorKind::Input);
            let v = b.tensor("v", [2, 5, 8], F16, TensorKind::Input);
            let y = b.tensor("y", [2, 3, 8], F16, TensorKind::Output);
            Op::Attention {
                q,
                k,
                v,
                heads: 2,
                softmax: SoftmaxPrecision::F16,
                mask: ipu_package::graph::AttentionMask::Causal,
                queries_scaled: false,
                output: y,
            }
        }),
        Err(GraphError::Attribute { attribute, .. }) if attribute == "mask"
    ));
    // Broadcast to a shape the input does not broadcast to.
    assert!(
        check(&|b| {
            let x = b.tensor("x", [3], F16, TensorKind::Input);
            let y = b.tensor("y", [2, 4], F16, TensorKind::Output);
            Op::Broadcast {
                input: x,
                output: y,
            }
        })
        .is_err()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Broadcasting is symmetric, and the result agrees with the rule
    /// axis by axis.
    #[test]
    fn broadcast_is_symmetric_and_axiswise(a in prop::collection::vec(1u64..4, 0..4), b in prop::collection::vec(1u64..4, 0..4)) {
        let ab = broadcast_shapes(&a, &b);
        prop_assert_eq!(&ab, &broadcast_shapes(&b, &a));
        let rank = a.len().max(b.len());
        let pad = |s: &[u64]| -> Vec<u64> { std::iter::repeat_n(1, rank - s.len()).chain(s.iter().copied()).collect() };
        let (pa, pb) = (pad(&a), pad(&b));
        let compatible = pa.iter().zip(&pb).all(|(x, y)| x == y || *x == 1 || *y == 1);
        prop_assert_eq!(ab.is_some(), compatible);
        if let Some(shape) = ab {
            for i in 0..rank {
                prop_assert_eq!(shape[i], pa[i].max(pb[i]));
            }
        }
    }
}
