-- The job field (`d`) of an entry's field list, '' when it has none.
local function job_field(fields)
  for j = 1, #fields, 2 do if fields[j] == 'd' then return fields[j + 1] end end
  return ''
end
