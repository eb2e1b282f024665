# __file__-relative paths that move with their modules (step 1)
set -e
sed -i 's|src = str(Path(__file__).resolve().parent.parent)|src = str(Path(__file__).resolve().parents[2])  # the folder that holds rescore/|' src/rescore/engine/sandbox.py src/rescore/engine/cuda_build.py
sed -i 's|Path(__file__).parent / "corpus"|Path(__file__).resolve().parents[1] / "corpus"|' src/rescore/engine/shards.py
sed -i 's|libs.add(os.path.realpath(os.path.dirname(os.path.abspath(__file__))))|libs.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # all of rescore/|' src/rescore/worker/confine.py
sed -i 's|Path(__file__).resolve().parents\[3\] / "config" / "published"|Path(__file__).resolve().parents[4] / "config" / "published"|' src/rescore/analysis/papers/published.py
grep -n "parents\[\|dirname(os.path.dirname" src/rescore/engine/sandbox.py src/rescore/engine/cuda_build.py src/rescore/engine/shards.py src/rescore/worker/confine.py src/rescore/analysis/papers/published.py
