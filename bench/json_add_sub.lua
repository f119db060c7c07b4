-- wrk script: POST a KServe v2 infer request for add_sub with both FP32[1,16] inputs as JSON
-- `data` lists (no binary extension), as a plain JSON client would.
--   wrk -t2 -c16 -d10s -s bench/json_add_sub.lua http://HOST:PORT/v2/models/MODEL/infer
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":['
  .. '{"name":"INPUT0","datatype":"FP32","shape":[1,16],'
  .. '"data":[0.0,1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0,10.0,11.0,12.0,13.0,14.0,15.0]},'
  .. '{"name":"INPUT1","datatype":"FP32","shape":[1,16],'
  .. '"data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}'

